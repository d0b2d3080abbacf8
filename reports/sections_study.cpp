// sections_study.cpp — the report's header (what was run, on what data, with what source and
// machines, and how to run it again), the table of every run, and the runs left out.
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <map>
#include <set>

#include "base/format.h"
#include "reports/escape.h"
#include "reports/format.h"
#include "reports/numerics.h"
#include "reports/report_context.h"
#include "base/shell_quote.h"

namespace fp4::reports {

namespace {

using store::RunState;

// A word as a POSIX shell reads it: as it is when it holds only characters no shell treats
// specially, else single-quoted.
std::string shell_word(const std::string& s) {
  const bool plain = !s.empty() && s.find_first_not_of("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"
                                                       "0123456789_./=:,+@%-") == std::string::npos;
  return plain ? s : shell_quote(s);
}

bool finished(RunState s) { return s == RunState::succeeded; }
bool excluded(RunState s) { return s == RunState::failed || s == RunState::diverged; }

// The last training step a run has reported (0 before the first).
int64_t last_train_step(const Study& st, const std::string& id) {
  const auto run = st.curves.find(id);
  if (run == st.curves.end()) return 0;
  const auto loss = run->second.find("train/loss");
  return loss == run->second.end() || loss->second.empty() ? 0 : loss->second.back().step;
}


// The metrics curves.csv holds.
bool is_curve_key(const std::string& key) { return key == "train/loss" || key == "eval/loss" || key == "eval/bpb"; }

Table grid_table(const Study& st) {
  Table t;
  t.caption = "Grids recorded in the store";
  t.header = {"grid", "TOML file", "axes (values)", "points", "recorded"};
  t.numeric = {false, false, false, true, false};
  for (const StudyGrid& g : st.grids) {
    std::vector<std::string> axes;
    for (const std::string& a : g.axis_names) {
      const auto it = g.axis_values.find(a);
      const std::vector<std::string> values = it != g.axis_values.end() ? it->second : std::vector<std::string>{};
      axes.push_back(fmt::format("{} ({}): {}", a, values.size(), fmt::join(values, ", ")));
    }
    t.rows.push_back({{g.name}, {g.file}, {axes.empty() ? "one point (no axes)" : fmt::format("{}", fmt::join(axes, " × "))},
                      {std::to_string(g.runs)}, {fmt_utc(g.created)}});
  }
  return t;
}

// What each grid of the study brings to the report.
std::string uses_of(const DeclaredGrid& g) {
  std::vector<std::string> uses;
  if (g.main) uses.push_back("main grid: loss curves, scaling, fits, gap table");
  if (g.seeds_of_main) uses.push_back("more seeds of the main grid's points (gap table)");
  if (g.noise_floor) uses.push_back("noise floor");
  if (g.ablation) uses.push_back("ablations");
  if (g.probes) uses.push_back("probes");
  return uses.empty() ? std::string("the runs table") : fmt::format("{}", fmt::join(uses, "; "));
}

Table study_grids_table(const Study& st) {
  std::map<std::string, const StudyRun*> run_of;
  for (const StudyRun& r : st.runs) run_of[r.record.id] = &r;
  Table t;
  t.caption = "The study's grids and what each brings to this report";
  t.header = {"grid", "TOML file", "used for", "points", "in the store", "succeeded", "diverged or failed", "no outcome yet"};
  t.numeric = {false, false, false, true, true, true, true, true};
  for (const DeclaredGrid& g : st.declared) {
    int stored = 0, done = 0, out = 0;
    for (const std::string& id : g.ids) {
      const auto it = run_of.find(id);
      if (it == run_of.end()) continue;
      ++stored;
      if (finished(it->second->record.state)) ++done;
      else if (excluded(it->second->record.state)) ++out;
    }
    const int open = static_cast<int>(g.ids.size()) - done - out;
    t.rows.push_back({{g.name}, {g.file}, {uses_of(g)}, {std::to_string(g.ids.size())}, {std::to_string(stored)},
                      {std::to_string(done)}, {std::to_string(out)},
                      {open == 0 ? "0" : fmt::format("{}{}", open, stored == 0 ? " (not run yet)" : "")}});
  }
  return t;
}

Table data_table(const Study& st) {
  // Runs grouped by (source, fingerprint): one row each, so a study that mixed data shows it.
  std::map<std::pair<std::string, std::string>, int> groups;
  for (const StudyRun& r : st.runs) ++groups[{r.data_source, r.record.data_fingerprint}];
  Table t;
  t.caption = "Training data";
  t.header = {"source", "fingerprint (SHA-256, as the trainer reported it)", "runs"};
  t.numeric = {false, false, true};
  for (const auto& [key, n] : groups)
    t.rows.push_back({{key.first},
                      {key.second.empty() ? "not in the store: no run row of its trainer ingested yet, or ingested into a store "
                                               "older than schema version 4, which did not keep it"
                                             : key.second},
                      {std::to_string(n)}});
  return t;
}

Table state_table(const Study& st) {
  std::map<std::string, int> counts;
  for (const StudyRun& r : st.runs) ++counts[store::run_state_name(r.record.state)];
  Table t;
  t.caption = "Runs by state";
  t.header = {"state", "runs", "meaning"};
  t.numeric = {false, true, false};
  const std::vector<std::pair<std::string, std::string>> order = {
      {"succeeded", "finished: in every figure and fit"},
      {"diverged", "a non-finite loss, gradient or quantizer input: a result, left out of the fits"},
      {"failed", "the trainer failed: left out (see Excluded and missing runs)"},
      {"running", "in progress: its curves so far are shown, it is in no fit or table of final losses"},
      {"orphaned", "interrupted: `fp4lab sweep run` resumes it"},
      {"pending", "recorded, never started"}};
  for (const auto& [state, meaning] : order)
    if (counts.count(state)) t.rows.push_back({{state}, {std::to_string(counts[state])}, {meaning}});
  if (!st.unrecorded.empty())
    t.rows.push_back({{"not started"}, {std::to_string(st.unrecorded.size())},
                      {"declared in the TOML, not yet in the store: `fp4lab sweep run` starts it"}});
  t.rows.push_back({{"total"}, {std::to_string(st.runs.size() + st.unrecorded.size())}, {""}});
  return t;
}

Table provenance_table(const Study& st) {
  std::map<std::string, int> commits, hosts, devices, gpus, cudas, versions;
  std::map<std::string, std::set<std::string>> libraries;
  double first = 0, last = 0, busy = 0;
  int without = 0;
  for (const auto& a : st.attempts) {
    const auto& p = a.provenance;
    if (p.git_commit.empty() && p.fp4lab_version.empty()) ++without;
    else {
      ++commits[p.git_commit + (p.git_dirty ? " (dirty: uncommitted changes)" : " (clean)")];
      ++versions[p.fp4lab_version];
      if (!p.gpu_name.empty()) ++gpus[p.gpu_name + ", driver " + p.gpu_driver];
      if (!p.cuda_version.empty()) ++cudas[p.cuda_version];
      if (p.libraries.is_object())
        for (const auto& [lib, v] : p.libraries.items()) libraries[lib].insert(v.is_string() ? v.get<std::string>() : v.dump());
    }
    ++hosts[p.host];
    ++devices[p.devices];
    if (a.start > 0 && (first == 0 || a.start < first)) first = a.start;
    last = std::max(last, std::max(a.end, a.start));
    if (a.end > a.start) busy += a.end - a.start;
  }
  auto list = [](const std::map<std::string, int>& m) {
    std::vector<std::string> items;
    for (const auto& [k, n] : m) items.push_back(fmt::format("{} ({} attempt{})", k.empty() ? "?" : k, n, n == 1 ? "" : "s"));
    return items.empty() ? std::string("none recorded") : fmt::format("{}", fmt::join(items, "; "));
  };
  Table t;
  t.caption = fmt::format("Provenance of the {} attempts", st.attempts.size());
  t.header = {"what", "recorded"};
  t.rows.push_back({{"source commit"}, {list(commits)}});
  t.rows.push_back({{"fp4lab version"}, {list(versions)}});
  t.rows.push_back({{"hosts"}, {list(hosts)}});
  t.rows.push_back({{"devices"}, {list(devices)}});
  t.rows.push_back({{"GPUs"}, {gpus.empty() ? "none (CPU runs)" : list(gpus)}});
  t.rows.push_back({{"CUDA"}, {cudas.empty() ? "none (CPU runs)" : list(cudas)}});
  std::vector<std::string> libs;
  for (const auto& [lib, vs] : libraries) libs.push_back(lib + " " + fmt::format("{}", fmt::join(vs, "/")));
  t.rows.push_back({{"libraries"}, {libs.empty() ? "none recorded" : fmt::format("{}", fmt::join(libs, ", "))}});
  t.rows.push_back({{"dates"}, {fmt::format("first attempt started {}, last activity {}", fmt_utc(first), fmt_utc(last))}});
  t.rows.push_back({{"trainer time"}, {format_duration(busy) + " over all attempts (wall clock, summed)"}});
  if (without > 0)
    t.rows.push_back({{"note"}, {fmt::format("{} attempts carry no provenance (recorded by a version-1 store)", without)}});
  return t;
}

std::vector<Block> reproduce_blocks(const ReportContext& ctx) {
  const Study& st = ctx.study;
  std::set<std::string> commits;
  bool dirty = false;
  for (const auto& a : st.attempts)
    if (!a.provenance.git_commit.empty()) {
      commits.insert(a.provenance.git_commit);
      dirty = dirty || a.provenance.git_dirty;
    }
  std::string sh;
  if (commits.size() == 1) {
    sh += "git checkout " + shell_word(*commits.begin()) + "   # the source every attempt was built from\n";
  } else if (commits.size() > 1) {
    sh += "# the attempts were built from " + std::to_string(commits.size()) + " commits:";
    for (const std::string& c : commits) sh += " " + shell_word(c);
    sh += "\ngit checkout " + shell_word(*commits.rbegin()) + "\n";
  }
  sh += "scripts/build.sh                 # installs the Debian packages, builds build/cli/fp4lab\n";
  const std::string spec_arg = display_path(ctx.options.spec_argument, st.repo_root);
  const std::string study_arg = !spec_arg.empty() ? shell_word(spec_arg)
                                                  : "--store " + shell_word(display_path(ctx.options.store_argument, st.repo_root));
  // The study's grids, the main one first, then any other grid the store recorded.
  std::vector<std::string> files;
  auto add = [&](const std::string& f) {
    if (!f.empty() && std::find(files.begin(), files.end(), f) == files.end()) files.push_back(f);
  };
  add(spec_arg);
  for (const DeclaredGrid& g : st.declared) add(g.file);
  std::set<std::string> declared_texts, recorded;
  for (const DeclaredGrid& g : st.declared) declared_texts.insert(g.text_hash);
  for (const StudyGrid& g : st.grids)
    if (!declared_texts.count(g.text_hash)) recorded.insert(g.file);
  for (const std::string& f : recorded) add(f);
  for (const std::string& f : files) sh += "build/cli/fp4lab sweep run " + shell_word(f) + "\n";
  sh += "build/cli/fp4lab fit " + study_arg + "\n";
  sh += "build/cli/fp4lab report " + study_arg + "\n";
  std::vector<Block> blocks;
  blocks.push_back(Paragraph{{text("From the repository root, with the TOML files as recorded below (each grid's text is "
                                   "stored byte for byte in the store):")}});
  blocks.push_back(CodeBlock{"sh", sh, ""});
  if (dirty)
    blocks.push_back(Note{{strong("Built from a modified tree."),
                           text(" Some attempts ran a binary built with uncommitted changes (dirty flag): the commit alone "
                                "does not reproduce them exactly.")}});
  for (const StudyGrid& g : st.grids)
    blocks.push_back(CodeBlock{"toml", g.text, "The TOML of grid " + g.name + " (" + g.file + ")"});
  return blocks;
}

}  // namespace

Section study_section(ReportContext& ctx) {
  const Study& st = ctx.study;
  Section s{slug("Study"), "Study", {}, {}};
  int done = 0, left = 0, out = 0;
  for (const StudyRun& r : st.runs) {
    if (finished(r.record.state)) ++done;
    else if (excluded(r.record.state)) ++out;
    else ++left;
  }
  left += static_cast<int>(st.unrecorded.size());
  const int total = static_cast<int>(st.runs.size() + st.unrecorded.size());
  s.blocks.push_back(Paragraph{{text("Study "), strong(st.name), text(fmt::format(
                                    ": {} runs declared, {} finished, {} excluded (diverged or failed), {} not finished. ",
                                    total, done, out, left)),
                                text("Store "), code(st.store_path.empty() ? "(not created yet)" : st.store_display),
                                text(st.store_path.empty() ? "." : fmt::format(" (schema version {}).", st.schema_version))}});
  if (total == 0)
    s.blocks.push_back(Note{{strong("Nothing to report yet."),
                             text(" The store holds no runs: run "), code("fp4lab sweep run STUDY.toml"),
                             text(" first. Every section below says what it is missing.")}});
  else if (left > 0)
    s.blocks.push_back(Note{{strong("This study is not finished."),
                             text(fmt::format(" {} of {} runs have no outcome yet (pending, running, interrupted or not "
                                              "started): every figure and table shows the {} finished runs only, and "
                                              "the fits cover what was fitted when ",
                                              left, total, done)),
                             code("fp4lab fit"), text(" last ran. The runs still missing are listed under "),
                             link("Excluded and missing runs", "#" + slug("Excluded and missing runs")), text(".")}});

  Section grid{slug("Grid"), "Grid", {}, {}};
  if (!st.declared.empty()) {
    grid.blocks.push_back(Paragraph{
        {text(st.spec_file.empty()
                  ? "The grids the store recorded; the main grid is the one with a [fit] table (every grid when none "
                    "has one)."
                  : "The TOML given is the main grid; the study's other grids are the TOML files beside it that name "
                    "the same store. A point declared by two grids is one run.")}});
    grid.blocks.push_back(study_grids_table(st));
  }
  for (const std::string& why : st.unreadable_specs)
    grid.blocks.push_back(Note{{strong("Not read as a grid of this study: "), text(why)}});
  if (st.grids.empty()) grid.blocks.push_back(Note{{text("No grid is recorded in the store yet.")}});
  else grid.blocks.push_back(grid_table(st));
  grid.blocks.push_back(state_table(st));
  s.subsections.push_back(std::move(grid));

  Section data{slug("Data"), "Data", {}, {}};
  if (st.runs.empty()) data.blocks.push_back(Note{{text("No runs, so no data source to show.")}});
  else data.blocks.push_back(data_table(st));
  s.subsections.push_back(std::move(data));

  Section prov{slug("Provenance"), "Provenance", {}, {}};
  if (st.attempts.empty()) prov.blocks.push_back(Note{{text("No attempt has started: no provenance recorded yet.")}});
  else prov.blocks.push_back(provenance_table(st));
  s.subsections.push_back(std::move(prov));

  Section rep{slug("Reproduce"), "Reproduce", reproduce_blocks(ctx), {}};
  s.subsections.push_back(std::move(rep));
  return s;
}

Section runs_section(ReportContext& ctx) {
  const Study& st = ctx.study;
  Section s{slug("Runs"), "Runs", {}, {}};
  std::vector<std::vector<std::string>> csv;
  Table t;
  t.header = {"run", "recipe", "model", "N (non-emb.)", "D (tokens)", "seed", "state", "steps", "final val. loss", "grids",
              "numerics"};
  t.numeric = {false, false, false, true, true, true, false, true, true, false, true};
  for (const StudyRun& r : st.runs) {
    const auto& rec = r.record;
    const int64_t done = last_train_step(st, rec.id);
    t.rows.push_back({{rec.name}, ctx.recipe_cell(rec.recipe), {rec.model}, {fmt_count(static_cast<double>(rec.n_params_nonembedding))},
                      {fmt_count(static_cast<double>(rec.tokens))}, {std::to_string(rec.seed)},
                      {store::run_state_name(rec.state)}, {fmt::format("{}/{}", done, r.steps)},
                      {r.final_loss ? fmt_loss(*r.final_loss) : (r.final_is_nan ? "not finite" : "—")},
                      {r.grids.empty() ? "—" : fmt::format("{}", fmt::join(r.grids, ", "))}, {numerics_text(r)}});
    csv.push_back({csv_field(rec.name), rec.id, csv_field(rec.recipe), rec.baseline ? "1" : "0", csv_field(rec.model),
                   std::to_string(rec.n_params), std::to_string(rec.n_params_nonembedding), std::to_string(rec.tokens),
                   fmt::format("{:.17g}", rec.flops_per_token), std::to_string(rec.seed), store::run_state_name(rec.state),
                   std::to_string(r.steps), std::to_string(done), r.final_step >= 0 ? std::to_string(r.final_step) : "",
                   r.final_loss ? fmt::format("{:.17g}", *r.final_loss) : (r.final_is_nan ? "nan" : ""),
                   csv_field(fmt::format("{}", fmt::join(r.grids, ";"))),
                   rec.numerics ? std::to_string(*rec.numerics) : ""});
  }
  t.csv = ctx.csv("final_losses.csv",
                  {"run", "run_id", "recipe", "baseline", "model", "n_params", "n_params_nonembedding", "tokens",
                   "flops_per_token", "seed", "state", "steps", "steps_done", "final_step", "final_loss", "grids",
                   "numerics"},
                  csv);
  t.caption = "Every run in the store; the final validation loss is the last evaluation (nats/token); numerics: the "
              "numerics identity it trained under";
  if (st.runs.empty()) s.blocks.push_back(Note{{text("The store holds no runs yet.")}});
  else s.blocks.push_back(std::move(t));
  std::vector<const StudyRun*> all;
  for (const StudyRun& r : st.runs) all.push_back(&r);
  if (auto note = numerics_span_note(all, "this store")) s.blocks.push_back(std::move(*note));

  // The loss curves of every run: the data of the curve figures. (The other metrics, learning rate,
  // gradient norm, throughput, stay in the store: a study's sidecars stay a few MB.)
  std::vector<std::vector<std::string>> curves;
  for (const StudyRun& r : st.runs) {
    const auto it = st.curves.find(r.record.id);
    if (it == st.curves.end()) continue;
    for (const auto& [key, rows] : it->second)
      if (is_curve_key(key))
        for (const auto& m : rows)
        curves.push_back({csv_field(r.record.name), r.record.id, std::to_string(m.step), std::to_string(m.tokens),
                          csv_field(key), m.is_nan ? "nan" : fmt::format("{:.17g}", m.value)});
  }
  ctx.csv("curves.csv", {"run", "run_id", "step", "tokens", "key", "value"}, curves);
  s.blocks.push_back(Paragraph{{text("The train and validation losses of every run at every step they were measured are in "),
                                link("curves.csv", "curves.csv"),
                                text(" (keys train/loss, eval/loss, eval/bpb); the other metrics (learning rate, gradient "
                                     "norm, throughput) are in the store's metrics table.")}});
  return s;
}

Section excluded_section(ReportContext& ctx) {
  const Study& st = ctx.study;
  Section s{slug("Excluded and missing runs"), "Excluded and missing runs", {}, {}};
  Table ex;
  ex.caption = "Runs left out of the figures and fits";
  ex.header = {"run", "recipe", "state", "attempts", "reason"};
  ex.numeric = {false, false, false, true, false};
  Table miss;
  miss.caption = "Runs without an outcome yet";
  miss.header = {"run", "recipe", "state", "progress"};
  miss.numeric = {false, false, false, true};
  for (const StudyRun& r : st.runs) {
    const auto& rec = r.record;
    if (excluded(rec.state)) {
      std::string reason = rec.error;
      if (reason.empty()) reason = rec.state == RunState::diverged ? "diverged (no detail recorded)" : "no error recorded";
      ex.rows.push_back({{rec.name}, ctx.recipe_cell(rec.recipe), {store::run_state_name(rec.state)},
                         {std::to_string(rec.attempts)}, {one_line(reason)}});
    } else if (!finished(rec.state)) {
      miss.rows.push_back({{rec.name}, ctx.recipe_cell(rec.recipe), {store::run_state_name(rec.state)},
                           {fmt::format("step {} of {}", last_train_step(st, rec.id), r.steps)}});
    }
  }
  for (const UnrecordedPoint& p : st.unrecorded)
    miss.rows.push_back({{p.name}, ctx.recipe_cell(p.recipe), {"not started"}, {"not in the store yet"}});
  if (ex.rows.empty()) s.blocks.push_back(Paragraph{{text("No run diverged or failed.")}});
  else s.blocks.push_back(std::move(ex));
  if (miss.rows.empty()) s.blocks.push_back(Paragraph{{text("Every declared run has an outcome: nothing is missing.")}});
  else s.blocks.push_back(std::move(miss));
  return s;
}

}  // namespace fp4::reports
