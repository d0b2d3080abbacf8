// study.cpp — see study.h.
#include "sweeps/study.h"

#include <algorithm>
#include <exception>
#include <map>
#include <string>
#include <system_error>
#include <vector>

#include "base/user_error.h"
#include "engine/data/markov_chain.h"
#include "engine/data/synthetic_spec.h"

namespace fp4::sweeps {

namespace fs = std::filesystem;

namespace {

// The same file, however it was named (one of them may not exist yet).
bool same_file(const fs::path& a, const fs::path& b) {
  std::error_code ea, eb;
  const auto ca = fs::weakly_canonical(a, ea), cb = fs::weakly_canonical(b, eb);
  return !ea && !eb ? ca == cb : a.lexically_normal() == b.lexically_normal();
}

// The true entropy rate of every synthetic source the grid's points train on (milliseconds for
// the demo's chain: the power iteration of engine/data/markov_chain.h). A source whose chain does
// not converge within the iteration's work limit is left out, not fatal: the report then shows E
// alone.
std::map<std::string, double> entropy_rates(const SweepSpec& spec) {
  std::map<std::string, double> out;
  for (const GridPoint& p : spec.points) {
    if (!p.config.contains("data") || !p.config["data"].is_string()) continue;
    const std::string source = p.config["data"].get<std::string>();
    if (out.count(source) != 0 || !data::is_synthetic_spec(source)) continue;
    try {
      out[source] = data::MarkovChain(data::parse_synthetic_spec(source)).entropies().rate;
    } catch (const UserError&) {
    }
  }
  return out;
}

}  // namespace

Study read_study(const fs::path& toml, DataCheck check, Siblings siblings) {
  Study study{load_sweep_spec(toml, check), {}};
  const SweepSpec& main = study.spec;
  study.declared.main = grid_record(main);
  if (siblings == Siblings::skip) return study;
  study.declared.entropy_rates = entropy_rates(main);
  // Named as the main TOML is: "results/first-study/ablation.toml" beside "results/first-study/study.toml".
  const fs::path dir = main.file.parent_path();
  std::vector<fs::path> files;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(dir.empty() ? "." : dir, ec)) {
    const fs::path file = dir / e.path().filename();
    if (file.extension() == ".toml" && e.is_regular_file(ec) && !same_file(file, main.file)) files.push_back(file);
  }
  std::sort(files.begin(), files.end());
  for (const fs::path& f : files) {
    try {
      const SweepSpec s = load_sweep_spec(f);
      if (same_file(s.store, main.store)) study.declared.others.push_back(grid_record(s));
    } catch (const std::exception& e) {
      study.declared.unreadable.push_back(e.what());
    }
  }
  return study;
}

}  // namespace fp4::sweeps
