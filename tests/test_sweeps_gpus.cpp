// test_sweeps_gpus.cpp — [executor] gpus_per_run: every point's config says how many GPUs its run
// trains on (only when not 1: a spec without it keeps every run id), the combinations that cannot
// work are refused at their file:line:col, and the Slurm job asks for that many GPUs per task.
#include <catch2/catch.hpp>

#include <cstdlib>
#include <filesystem>
#include <set>
#include <sstream>
#include <string>

#include "base/user_error.h"
#include "sweeps/slurm.h"
#include "sweeps/spec.h"
#include "tests/sweeps_test_helpers.h"

using fp4::sweeps::parse_sweep_spec;
using fp4::sweeps::SweepSpec;

namespace {

std::string spec_text(const std::string& device, const std::string& executor, int64_t batch_tokens = 256) {
  return "[sweep]\nname = \"dp\"\ndevice = \"" + device +
         "\"\n[data]\nsource = \"synthetic:markov?order=1&vocab=64&branch=4&seed=1\"\n"
         "[model]\npreset = \"d1\"\nseq_len = 32\n[train]\ntokens = 1024\nbatch_tokens = " +
         std::to_string(batch_tokens) + "\nmicro_batch = 2\n[eval]\nevery = 0\ntokens = 128\n[grid]\nseed = [0, 1]\n" +
         "[executor]\n" + executor;
}

SweepSpec parse(const std::string& text) { return parse_sweep_spec(text, "spec.toml", "/study"); }

std::string error_of(const std::string& text) {
  try {
    parse(text);
  } catch (const fp4::UserError& e) {
    return e.what();
  }
  FAIL("no error for:\n" << text);
  return {};
}

}  // namespace

TEST_CASE("sweeps: gpus_per_run goes into every run's config, and only when it is not 1", "[sweeps][gpus]") {
  const SweepSpec plain = parse(spec_text("cuda", ""));
  const SweepSpec one = parse(spec_text("cuda", "gpus_per_run = 1\n"));
  const SweepSpec two = parse(spec_text("cuda", "gpus_per_run = 2\n"));
  REQUIRE(plain.points.size() == 2);
  CHECK(plain.executor.gpus_per_run == 1);
  CHECK(two.executor.gpus_per_run == 2);
  for (size_t i = 0; i < plain.points.size(); ++i) {
    CHECK_FALSE(plain.points[i].config.contains("gpus"));
    CHECK(one.points[i].id == plain.points[i].id);  // naming the default changes no id
    CHECK(two.points[i].config.at("gpus") == 2);
    CHECK(two.points[i].id != plain.points[i].id);  // other N, other bits: another run
  }
}

TEST_CASE("sweeps: gpus_per_run that cannot work is refused where it is written", "[sweeps][gpus]") {
  CHECK_THAT(error_of(spec_text("cuda", "gpus_per_run = 0\n")), Catch::Contains("executor.gpus_per_run"));
  CHECK_THAT(error_of(spec_text("cuda", "gpus_per_run = 2\nruns_per_gpu = 2\n")),
             Catch::Contains("cannot be combined with executor.runs_per_gpu > 1"));
  const std::string cpu = error_of(spec_text("cpu", "gpus_per_run = 2\n"));
  CHECK_THAT(cpu, Catch::StartsWith("spec.toml:"));
  CHECK_THAT(cpu, Catch::Contains("needs device \"cuda\""));
  // 256 tokens per step are 4 micro-batches of 2 × 32: 3 GPUs cannot share them.
  CHECK_THAT(error_of(spec_text("cuda", "gpus_per_run = 3\n")), Catch::Contains("does not divide the 4 micro-steps"));
}

TEST_CASE("sweeps: the Slurm job asks for gpus_per_run GPUs per task", "[sweeps][gpus][slurm]") {
  const fp4::test::ScratchDir dir;
  for (const int n : {1, 2}) {
    const std::string name = "dp" + std::to_string(n);
    fp4::test::spit(dir / (name + ".toml"), spec_text("cuda", n == 1 ? "" : "gpus_per_run = 2\n"));
    SweepSpec spec = fp4::sweeps::load_sweep_spec(dir / (name + ".toml"));
    spec.store = dir / (name + ".db");
    spec.run_root = dir / (name + "-runs");
    fp4::sweeps::SlurmOptions o;
    o.out = dir / (name + ".sbatch");
    o.trainer = "/opt/fp4lab";
    std::ostringstream out;
    REQUIRE(fp4::sweeps::write_slurm_job(spec, o, out) == 2);
    const std::string script = fp4::test::slurp(o.out);
    CHECK_THAT(script, Catch::Contains("#SBATCH --ntasks=1\n"));
    CHECK_THAT(script, Catch::Contains("#SBATCH --gpus-per-task=\"" + std::to_string(n) + "\"\n"));
  }
}

#ifdef FP4LAB_HAVE_CUDA
// gpus_per_run = 2 over 5 visible GPUs: two slots of two GPUs each (the fifth idle, said so), each
// run's child sees its group through CUDA_VISIBLE_DEVICES and its run.json asks for 2 GPUs. A
// stand-in trainer records what it was given, so this runs on any machine with a CUDA build.
TEST_CASE("sweeps: gpus_per_run gives each run a group of GPUs of its own", "[sweeps][gpus]") {
  fp4::test::ScratchDir dir;
  fp4::test::TinyGrid g;
  g.grid = "seed = [0, 1, 2, 3]\ntokens = [1280]\n";
  g.executor = "gpus_per_run = 2\n";
  g.device = "cuda";
  const std::filesystem::path toml = fp4::test::write_tiny_grid(dir.path(), "groups", g);
  const std::filesystem::path fake = dir / "fake-trainer.sh";
  fp4::test::write_gpu_recording_trainer(fake);
  const std::string cmd = "FP4LAB_TRAINER='" + fake.string() + "' '" + FP4LAB_BINARY +
                          "' sweep run --plain --gpus 0,1,2,3,4 '" + toml.string() + "' >'" +
                          (dir / "groups.log").string() + "' 2>&1";
  const int status = std::system(cmd.c_str());
  const std::string log = fp4::test::slurp(dir / "groups.log");
  INFO(log);
  CHECK(WEXITSTATUS(status) == 0);
  CHECK_THAT(log, Catch::Contains("note: 5 GPU(s) visible, runs take 2 each: 1 stay idle"));
  std::set<std::string> seen;
  int runs = 0;
  for (const auto& d : std::filesystem::directory_iterator(dir / "groups-runs")) {
    if (!std::filesystem::is_directory(d.path())) continue;
    ++runs;
    seen.insert(fp4::test::slurp(d.path() / "gpu.txt"));
    CHECK_THAT(fp4::test::slurp(d.path() / "run.json"), Catch::Contains("\"gpus\": 2"));
  }
  CHECK(runs == 4);
  CHECK(seen == std::set<std::string>{"0,1", "2,3"});
}
#endif
