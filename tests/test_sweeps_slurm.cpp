// test_sweeps_slurm.cpp — `fp4lab sweep slurm` against hostile input: names and paths with control
// characters are refused where they were written; every other character (spaces, quotes, $, `,
// ;, #, %) is quoted so that the script parses, sbatch reads the intended values, and running a
// task executes nothing but the trainer.
#include <catch2/catch.hpp>

#include <filesystem>
#include <string>

#include "base/shell_quote.h"
#include "sweeps/slurm.h"
#include "tests/sweeps_test_helpers.h"

namespace fs = std::filesystem;
using fp4::shell_quote;
using fp4::test::ScratchDir;

namespace {

// Names that would run something if they reached bash unquoted, or split an #SBATCH value.
const std::string kHostile = "a b 'q' \"dq\" $(touch INJECTED-1) `touch INJECTED-2`; touch INJECTED-3 #c %A";

// TOML basic-string escaping for `s`.
std::string toml_string(const std::string& s) {
  std::string out = "\"";
  for (char c : s) {
    if (c == '"' || c == '\\') out += '\\';
    out += c;
  }
  return out + "\"";
}

// A two-step CPU run; `sweep_lines` go into [sweep] after its name.
std::string tiny_spec(const std::string& sweep_lines) {
  return "[sweep]\nname = \"hostile\"\n" + sweep_lines +
         "\n[data]\nsource = \"synthetic:markov?order=1&vocab=64&branch=4&seed=1\"\n"
         "[model]\npreset = \"d1\"\nseq_len = 32\n[train]\ntokens = 256\nbatch_tokens = 128\nmicro_batch = 2\n"
         "[eval]\nevery = 0\ntokens = 128\n[executor]\nthreads_per_job = 1\n";
}

// Every file under `root` whose name starts with INJECTED.
int injected_files(const fs::path& root) {
  int n = 0;
  for (const auto& e : fs::recursive_directory_iterator(root))
    n += e.path().filename().string().rfind("INJECTED", 0) == 0;
  return n;
}

}  // namespace

TEST_CASE("sweep slurm refuses control characters in every name and path it would write", "[sweeps][slurm]") {
  ScratchDir dir;
  // A newline in run_root: refused where the TOML says it, nothing created.
  fp4::test::spit(dir / "nl.toml", tiny_spec("run_root = \"runs\\ntouch INJECTED-0\""));
  auto r = fp4::test::run_fp4lab("sweep slurm " + shell_quote((dir / "nl.toml").string()) + " --out " +
                                     shell_quote((dir / "nl.sbatch").string()),
                                 dir);
  CHECK(r.exit_code == 2);
  CHECK(r.err.find("nl.toml:3:12: sweep.run_root: contains the control character \\n (at byte 4)") !=
        std::string::npos);
  CHECK(std::count(r.err.begin(), r.err.end(), '\n') == 1);
  CHECK_FALSE(fs::exists(dir / "nl.sbatch"));
  // A tab in the store path, the same.
  fp4::test::spit(dir / "tab.toml", tiny_spec("store = \"a\\tb.db\""));
  r = fp4::test::run_fp4lab("sweep plan " + shell_quote((dir / "tab.toml").string()), dir);
  CHECK(r.exit_code == 2);
  CHECK(r.err.find("sweep.store: contains the control character \\t") != std::string::npos);

  // A spec whose own path holds a newline, --fp4lab and --sbatch values with one: refused by the writer.
  const fs::path odd = dir / "odd\ndir";
  fs::create_directories(odd);
  fp4::test::spit(odd / "s.toml", tiny_spec(""));
  r = fp4::test::run_fp4lab("sweep slurm " + shell_quote((odd / "s.toml").string()) + " --out " +
                                shell_quote((dir / "j.sbatch").string()),
                            dir);
  CHECK(r.exit_code == 2);
  CHECK(r.err.find("the spec's path") != std::string::npos);
  fp4::test::spit(dir / "ok.toml", tiny_spec(""));
  const std::string ok = "sweep slurm " + shell_quote((dir / "ok.toml").string()) + " --out " +
                         shell_quote((dir / "j.sbatch").string());
  r = fp4::test::run_fp4lab(ok + " --fp4lab " + shell_quote("/bin/fp4lab\nrm -rf /"), dir);
  CHECK(r.exit_code == 2);
  CHECK(r.err.find("--fp4lab \"/bin/fp4lab\" contains the control character \\n") != std::string::npos);
  r = fp4::test::run_fp4lab(ok + " --sbatch=" + shell_quote("--comment=x\ntouch INJECTED-4"), dir);
  CHECK(r.exit_code == 2);
  r = fp4::test::run_fp4lab(ok + " --sbatch=" + shell_quote("--partition;touch INJECTED-5"), dir);
  CHECK(r.exit_code == 2);
  CHECK(r.err.find("must be one long option, --name or --name=value") != std::string::npos);
  CHECK_FALSE(fs::exists(dir / "j.sbatch"));
  CHECK(injected_files(dir.path()) == 0);
}

TEST_CASE("sweep slurm quotes hostile paths: bash -n accepts the job, a task runs only the trainer", "[sweeps][slurm]") {
  ScratchDir dir;
  // The spec in a hostile directory, its run_root hostile too, fp4lab reached through a hostile link.
  const fs::path home = dir / ("spec " + kHostile);
  fs::create_directories(home);
  const fs::path toml = home / "s.toml";
  fp4::test::spit(toml, tiny_spec("run_root = " + toml_string("runs " + kHostile)));
  const fs::path trainer = dir / ("fp4lab " + kHostile);
  fs::create_symlink(FP4LAB_BINARY, trainer);
  const fs::path job = dir / "job.sbatch";
  auto r = fp4::test::run_fp4lab("sweep slurm " + shell_quote(toml.string()) + " --out " + shell_quote(job.string()) +
                                     " --fp4lab " + shell_quote(trainer.string()) + " --sbatch=" +
                                     shell_quote("--comment=two words #not a comment"),
                                 dir);
  INFO(r.err);
  REQUIRE(r.exit_code == 0);
  const std::string script = fp4::test::slurp(job);
  INFO(script);
  // sbatch's reading of #SBATCH lines: double quotes group, backslash escapes, '%' is doubled.
  const fs::path run_root = home / ("runs " + kHostile);
  std::string pattern;
  for (char c : run_root.string()) pattern += c == '%' ? std::string("%%") : std::string(1, c);
  CHECK(script.find("#SBATCH --output=" + fp4::sweeps::sbatch_quote(pattern + "/slurm-%A_%a.out") + "\n") !=
        std::string::npos);
  CHECK(script.find("#SBATCH --comment=\"two words #not a comment\"\n") != std::string::npos);
  // bash parses it, and a task, run the way Slurm runs it, trains its run and runs nothing else.
  CHECK(std::system(("bash -n " + shell_quote(job.string())).c_str()) == 0);
  const std::string task =
      "cd " + shell_quote(dir.path().string()) + " && SLURM_ARRAY_TASK_ID=0 bash " + shell_quote(job.string());
  CHECK(std::system(task.c_str()) == 0);
  CHECK(injected_files(dir.path()) == 0);
  int logs = 0;
  for (const auto& e : fs::directory_iterator(run_root)) {
    CHECK(fs::exists(e.path() / "status.json"));
    logs += fs::exists(e.path() / "output.log");
  }
  CHECK(logs == 1);
}

TEST_CASE("sbatch_quote escapes what sbatch's parser treats specially", "[sweeps][slurm]") {
  CHECK(fp4::sweeps::sbatch_quote("plain") == "\"plain\"");
  CHECK(fp4::sweeps::sbatch_quote("a \"b\" c\\d #e 'f'") == "\"a \\\"b\\\" c\\\\d #e 'f'\"");
}

TEST_CASE("sweep slurm --max-parallel: N throttles the array to N tasks at once, 0 (the default) to none", "[sweeps][slurm]") {
  ScratchDir dir;
  const fs::path toml = dir / "s.toml";
  fp4::test::spit(toml, tiny_spec(""));
  const auto array_line = [&](const std::string& flags) {
    const fs::path job = dir / "job.sbatch";
    const auto r = fp4::test::run_fp4lab("sweep slurm " + shell_quote(toml.string()) + " --out " +
                                             shell_quote(job.string()) + flags,
                                         dir);
    INFO(r.err);
    REQUIRE(r.exit_code == 0);
    const std::string script = fp4::test::slurp(job);
    const size_t at = script.find("#SBATCH --array=");
    REQUIRE(at != std::string::npos);
    return script.substr(at, script.find('\n', at) - at);
  };
  CHECK(array_line("") == "#SBATCH --array=0-0");
  CHECK(array_line(" --max-parallel 0") == "#SBATCH --array=0-0");
  CHECK(array_line(" --max-parallel 3") == "#SBATCH --array=0-0%3");
  const auto r = fp4::test::run_fp4lab("sweep slurm " + shell_quote(toml.string()) + " --out j --max-parallel -1", dir);
  CHECK(r.exit_code == 2);
}
