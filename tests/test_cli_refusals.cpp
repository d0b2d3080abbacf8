// test_cli_refusals.cpp — refusals that must come before any work: each is one line on stderr with
// exit code 2, before anything is written.
#include <catch2/catch.hpp>

#include <algorithm>
#include <filesystem>
#include <string>
#include <vector>

#include "base/user_error.h"
#include "sweeps/gpu_list.h"
#include "base/shell_quote.h"
#include "tests/sweeps_test_helpers.h"

namespace fs = std::filesystem;
using fp4::shell_quote;
using fp4::test::ScratchDir;

namespace {

// `fp4lab ARGS` must exit 2 with exactly one line on stderr that contains each of `wanted`.
void refused(const std::string& args, const ScratchDir& dir, const std::vector<std::string>& wanted) {
  const auto r = fp4::test::run_fp4lab(args, dir);
  INFO("fp4lab " << args << "\n" << r.err);
  CHECK(r.exit_code == 2);
  CHECK(std::count(r.err.begin(), r.err.end(), '\n') == 1);
  for (const std::string& w : wanted) CHECK(r.err.find(w) != std::string::npos);
}
void refused(const std::string& args, const ScratchDir& dir, const std::string& wanted) {
  refused(args, dir, std::vector<std::string>{wanted});
}

}  // namespace

TEST_CASE("a sweep whose data source does not open is refused before anything is created", "[cli][sweeps]") {
  ScratchDir dir;
  fp4::test::TinyGrid g;
  g.grid = "tokens = [1280]\n";
  g.data = "no-such-shards";
  const fs::path toml = fp4::test::write_tiny_grid(dir.path(), "nodata", g);
  for (const std::string command : {"sweep run --plain ", "sweep slurm --out job.sbatch "}) {
    refused(command + shell_quote(toml.string()), dir, "nodata.toml:6:10: data.source: ");
    CHECK_FALSE(fs::exists(dir / "nodata.db"));
    CHECK_FALSE(fs::exists(dir / "nodata-runs"));
  }
  // Planning a study before its data is built still works (a shard directory is assumed to hold bytes).
  CHECK(fp4::test::run_fp4lab("sweep plan " + shell_quote(toml.string()), dir).exit_code == 0);
  // A directory that exists but is not a shard directory is refused even by plan: it was built wrong.
  fs::create_directories(dir / "no-such-shards");
  fp4::test::spit(dir / "no-such-shards" / "manifest.json", "{\"format_version\": 1,");
  refused("sweep plan " + shell_quote(toml.string()), dir, "data.source: ");
}

TEST_CASE("a sweep whose eval.tokens exceeds its data's validation split is refused at load", "[cli][sweeps]") {
  ScratchDir dir;
  std::string text;
  for (int d = 0; d < 400; ++d) text += "document " + std::to_string(d) + " says something\n<|endoftext|>\n";
  fp4::test::spit(dir / "corpus.txt", text);
  const auto built = fp4::test::run_fp4lab("data build --tokenizer bytes " + shell_quote((dir / "corpus.txt").string()) +
                                               " --out " + shell_quote((dir / "shards").string()),
                                           dir);
  REQUIRE(built.exit_code == 0);
  fp4::test::TinyGrid g;
  g.grid = "tokens = [1280]\n\"eval.tokens\" = [128, 4096]\n";  // 4 validation documents: under 200 tokens
  g.data = "shards";
  const fs::path toml = fp4::test::write_tiny_grid(dir.path(), "short", g);
  refused("sweep run --plain " + shell_quote(toml.string()), dir,
          "grid.eval.tokens: eval.tokens = 4096 needs 4097 validation tokens, but data.source has ");
  CHECK_FALSE(fs::exists(dir / "short.db"));
}

TEST_CASE("a store path that is a directory is a user error", "[cli][sweeps]") {
  ScratchDir dir;
  const fs::path toml = fp4::test::write_tiny_grid(dir.path(), "s", "tokens = [1280]\n");
  fs::create_directories(dir / "s.db");
  refused("sweep run --plain " + shell_quote(toml.string()), dir, "s.db is a directory, not a sweep store");
  refused("sweep status " + shell_quote(toml.string()), dir, "is a directory, not a sweep store");
  refused("sweep ingest --store " + shell_quote((dir / "s.db").string()) + " x", dir, "is a directory");
}

TEST_CASE("a sweep spec that is not a regular file, or too big to be one, is refused before it is read", "[cli][sweeps]") {
  ScratchDir dir;
  // /dev/zero used to be read until memory ran out (std::bad_alloc, exit 1).
  for (const std::string command : {"sweep run --plain ", "sweep plan ", "sweep status ", "fit ", "report "})
    refused(command + "/dev/zero", dir, "/dev/zero: not a regular file; a sweep spec is a TOML file");
  fs::create_directories(dir / "a-directory.toml");
  refused("sweep run --plain " + shell_quote((dir / "a-directory.toml").string()), dir, "not a regular file");
  fp4::test::spit(dir / "big.toml", std::string((1 << 20) + 1, '#'));
  refused("sweep run --plain " + shell_quote((dir / "big.toml").string()), dir,
          "big.toml: 1048577 bytes, more than a sweep spec's limit of 1048576 (1 MiB)");
  CHECK_FALSE(fs::exists(dir / "runs"));
}

TEST_CASE("numeric options say what they take, in words", "[cli]") {
  ScratchDir dir;
  const std::string toml = shell_quote(fp4::test::write_tiny_grid(dir.path(), "n", "tokens = [1280]\n").string());
  refused("sweep run --jobs 0 " + toml, dir, "--jobs: expected a whole number from 1 to 4096, got \"0\"");
  refused("sweep run --jobs abc " + toml, dir, "--jobs: expected a whole number from 1 to 4096, got \"abc\"");
  refused("sweep run --jobs 1e3 " + toml, dir, "got \"1e3\"");
  refused("sweep slurm --out j --max-parallel -1 " + toml, dir, "--max-parallel: expected a whole number from 0 to");
  refused("train --config x.json --dir d --stop-after -1", dir, "--stop-after: expected a whole number 1 or more, got \"-1\"");
  refused("train --config x.json --dir d --stop-after 99999999999999999999", dir, "--stop-after: expected a whole number");
  refused("data build --tokenizer bytes a.txt --out o --val-every 0", dir, "--val-every: expected a whole number 1 or more");
  refused("quant probe --rows 0", dir, "--rows: expected a whole number from 1 to 2147483647, got \"0\"");
  refused("quant probe --seed -3", dir, "--seed: expected a whole number from 0 to 2^64 - 1, got \"-3\"");
  refused("quant probe --outlier-rate 2", dir, "--outlier-rate: expected a number from 0 to 1, got \"2\"");
  refused("quant probe --nu nan", dir, "--nu: expected a number from 0.5 to 1000000000, got \"nan\"");
  refused("fit --points p.csv --bootstrap abc", dir, "--bootstrap: expected a whole number 0 or more, got \"abc\"");
  refused("fit --points p.csv --seed -1", dir, "--seed: expected a whole number from 0 to 2^64 - 1, got \"-1\"");
  refused("fit --points p.csv --huber-delta 0", dir, "--huber-delta: expected a number greater than 0, got \"0\"");
  refused("fit --points p.csv --threads -5", dir, "--threads: expected a whole number from 0 to 4096, got \"-5\"");
  refused("report --store s.db --smooth-steps -1", dir, "--smooth-steps: expected a whole number from 0 to 2147483647");
  refused("report --store s.db --smooth-steps abc", dir, "--smooth-steps: expected a whole number");
  // No message carries a type's whole range (CLI11's own checks printed 309 digits).
  const auto r = fp4::test::run_fp4lab("sweep run --jobs 0 " + toml, dir);
  CHECK(r.err.size() < 200);
}

TEST_CASE("a run config's bad numbers and repeated keys end in one line with exit 2", "[cli][run]") {
  ScratchDir dir;
  const auto config = [&](const std::string& train) {
    fp4::test::spit(dir / "run.json", R"({"model": {"preset": "d1"}, "data": "synthetic:markov", "train": {)" + train +
                                          R"(}, "device": "cpu"})");
    return "train --print-config --config " + shell_quote((dir / "run.json").string());
  };
  refused(config(R"("steps": 2, "lr": 1e400)"), dir, std::vector<std::string>{"train.lr", "1e400"});
  refused(config(R"("steps": 2, "lr": 0.001, "lr": 5)"), dir, std::vector<std::string>{"train.lr", "given twice"});
  refused(config(R"("steps": 99999999999999999999)"), dir, "train.steps");
}

TEST_CASE("train --print-config refuses the options it would ignore", "[cli][run]") {
  ScratchDir dir;
  fp4::test::spit(dir / "run.json",
                  R"({"model": {"preset": "d1"}, "data": "synthetic:markov", "train": {"steps": 2}, "device": "cpu"})");
  const std::string config = shell_quote((dir / "run.json").string());
  refused("train --print-config --config " + config + " --dir " + shell_quote((dir / "d").string()), dir,
          std::vector<std::string>{"excludes", "--dir", "--print-config"});
  refused("train --print-config --config " + config + " --resume", dir, std::vector<std::string>{"excludes", "--resume", "--print-config"});
  refused("train --print-config --config " + config + " --stop-after 3", dir, std::vector<std::string>{"excludes", "--stop-after", "--print-config"});
  CHECK_FALSE(fs::exists(dir / "d"));
  CHECK(fp4::test::run_fp4lab("train --print-config --config " + config, dir).exit_code == 0);
}

TEST_CASE("a GPU named twice is refused wherever a GPU list is given", "[cli][sweeps]") {
  ScratchDir dir;
  const std::string toml = shell_quote(fp4::test::write_tiny_grid(dir.path(), "g", "tokens = [1280]\n").string());
  refused("sweep run --gpus 0,0 " + toml, dir, "--gpus 0,0: lists GPU 0 twice");
  refused("sweep run --gpus 0,00 " + toml, dir, "lists GPU 0 twice");
  refused("sweep run --gpus 0,,1 " + toml, dir, "--gpus 0,,1: \"\" is not a GPU");
  refused("sweep run --gpus 1024 " + toml, dir, "GPU index 1024 is out of range (0 to 1023)");
}

TEST_CASE("GPU lists: indices and UUIDs, one parser", "[sweeps]") {
  using fp4::sweeps::parse_gpu_list;
  CHECK(parse_gpu_list("", "x").empty());
  CHECK(parse_gpu_list("3,007,1", "x") == std::vector<std::string>{"3", "7", "1"});
  const std::string uuid = "GPU-8932f937-d72c-4106-c12f-20bd9faed9f6";
  CHECK(parse_gpu_list(uuid + ",0,MIG-GPU-8932f937/1/0", "x") ==
        std::vector<std::string>{uuid, "0", "MIG-GPU-8932f937/1/0"});
  const auto error_of = [](const std::string& text) -> std::string {
    try {
      parse_gpu_list(text, "CUDA_VISIBLE_DEVICES=" + text);
    } catch (const fp4::UserError& e) {
      return e.what();
    }
    return "(accepted)";
  };
  CHECK(error_of(uuid + "," + uuid).find("lists GPU " + uuid + " twice") != std::string::npos);
  CHECK(error_of("-1").rfind("CUDA_VISIBLE_DEVICES=-1: \"-1\" is not a GPU", 0) == 0);
  CHECK(error_of("GPU-").find("is not a GPU") != std::string::npos);
  CHECK(error_of("0;rm").find("is not a GPU") != std::string::npos);
  CHECK(error_of("99999999999").find("out of range") != std::string::npos);
}
