// fit_study.cpp — see fit_study.h.
#include "fit/fit_study.h"

#include <algorithm>
#include <cstdio>
#include <map>
#include <memory>

#include <fmt/format.h>

#include "base/clock.h"
#include "base/files.h"
#include "base/format.h"
#include "base/user_error.h"
#include "fit/contrasts.h"
#include "fit/fit_data.h"
#include "store/store.h"

namespace fp4::fit {

namespace {

// Progress on stderr: one redrawn line on a terminal, a line per finished stage otherwise.
class FitProgressPrinter {
 public:
  explicit FitProgressPrinter(bool terminal) : terminal_(terminal) {}
  ~FitProgressPrinter() {
    if (terminal_ && drawn_) std::fprintf(stderr, "\n");
  }
  void operator()(const FitProgress& p) {
    const double now = monotonic_s();
    if (p.stage != stage_) {
      stage_ = p.stage;
      start_ = now;
    }
    const double elapsed = now - start_;
    if (p.done == p.total && !terminal_) {
      std::fprintf(stderr, "fit: %s: %zu/%zu done in %s\n", p.stage.c_str(), p.done, p.total,
                   format_duration(elapsed).c_str());
      return;
    }
    if (!terminal_) return;
    const double left = p.done > 0 ? elapsed * static_cast<double>(p.total - p.done) / static_cast<double>(p.done) : -1;
    std::fprintf(stderr, "\r\033[Kfit: %s: %zu/%zu, %s left", p.stage.c_str(), p.done, p.total,
                 format_duration(left).c_str());
    drawn_ = true;
  }

 private:
  bool terminal_, drawn_ = false;
  std::string stage_;
  double start_ = 0;
};

}  // namespace

FitRequest fit_request(const store::FitTable& table, const FitCommand& c, std::string& n_kind) {
  FitRequest r;
  n_kind = "nonembedding";
  for (const std::string& l : table.laws) r.laws.push_back(parse_law(l));
  if (table.n) n_kind = *table.n;
  if (table.bootstrap) r.bootstrap = *table.bootstrap;
  if (table.seed) r.seed = *table.seed;
  if (table.huber_delta) r.huber_delta = *table.huber_delta;
  if (table.gamma) r.gamma = *table.gamma;
  if (table.targets) {
    r.targets.clear();
    for (const auto& [n, d] : *table.targets) r.targets.push_back({n, d});
  }
  if (!c.laws.empty()) r.laws = c.laws;
  if (c.n_kind) n_kind = *c.n_kind;
  if (c.bootstrap) r.bootstrap = *c.bootstrap;
  if (c.seed) r.seed = *c.seed;
  if (c.huber_delta) r.huber_delta = *c.huber_delta;
  if (c.gamma) r.gamma = true;
  if (!c.targets.empty()) r.targets = c.targets;
  r.threads = c.threads;
  r.recipes_named = !c.recipes.empty();
  return r;
}

void require_one_source(bool study, bool store, bool points) {
  if (study + store + points != 1)
    throw UserError("fp4lab fit: give exactly one of STUDY.toml, --store FILE.db or --points FILE.csv");
}

ContrastSet study_contrasts(const store::Store& store, const store::DeclaredStudy* study) {
  const std::vector<ContrastRun> runs = load_contrast_runs(store);
  std::vector<std::string> main_recipes;
  std::map<std::string, std::string> bases;
  store::CompareTable table;
  std::string file, grid;
  if (study != nullptr) {
    for (const store::GridPointRecord& p : study->main.points)
      if (std::find(main_recipes.begin(), main_recipes.end(), p.recipe) == main_recipes.end()) main_recipes.push_back(p.recipe);
    bases = study->main.recipe_bases;
    for (const store::GridRecord& g : study->others) bases.insert(g.recipe_bases.begin(), g.recipe_bases.end());
    table = study->main.compare;
    file = study->main.file.filename().string();
    grid = study->main.name;
  }
  return compute_contrasts(runs, families_asked(table, file, main_recipes, bases, runs), grid);
}

void fit_study(const FitCommand& c) {
  require_one_source(c.study != nullptr, !c.store.empty(), !c.points.empty());

  const std::filesystem::path store_path = c.study != nullptr ? c.study->main.store : c.store;
  std::string n_kind;
  const FitRequest request = fit_request(c.study != nullptr ? c.study->main.fit : store::FitTable{}, c, n_kind);

  std::unique_ptr<store::Store> store;
  FitData data;
  if (!c.points.empty()) {
    if (c.n_kind) throw UserError("--n applies to a store; a points file gives N itself");
    data = load_csv_data(c.points);
  } else {
    if (!std::filesystem::exists(store_path))
      throw UserError(store_path.string() + ": no store yet: run the study first (fp4lab sweep run STUDY.toml)");
    // Read-only (printing stored fits is a pure read), once an older schema is migrated.
    store = store::Store::open(store_path, store::Store::Mode::read_migrating);
    // A study's grid picks its own runs out of a store that other grids share; --store fits them all.
    data = c.study != nullptr ? load_grid_data(*store, c.study->main, n_kind) : load_store_data(*store, n_kind);
  }
  data = select_recipes(data, c.recipes);
  // A store where the default laws can fit nothing (one size, one length: a seeds grid) still has
  // its paired contrasts: they are computed and printed, and the output says why no law was fitted.
  FitPlan plan;
  std::string no_law;
  try {
    plan = plan_fits(data, request);
  } catch (const NothingToFit& e) {
    if (!store) throw;
    no_law = e.what();
  }
  // The table lists what was skipped at its end; other formats, and a table written to a file, say it here.
  if (c.format != OutputFormat::table || !c.out.empty())
    for (const SkippedFit& s : plan.skipped) std::fprintf(stderr, "fp4lab fit: skipped %s\n", s.reason.c_str());

  std::vector<StoredFit> fits;
  std::vector<std::string> notes;
  bool all_found = store != nullptr && !c.refit;
  if (!no_law.empty()) all_found = true;  // nothing to fit, nothing to find
  if (all_found)
    for (const PlannedFit& p : plan.fits) {
      auto found = find_fit(*store, law_name(p.law), p.scope, p.input_hash);
      // A fit stored by an fp4lab without guardrails is fitted again: its output would lack them.
      if (!found || !found->guardrails_checked) {
        all_found = false;
        break;
      }
      fits.push_back(std::move(*found));
      notes.push_back(fmt::format("stored fit {} (same data and options; --refit fits again)", fits.back().id));
    }
  if (!all_found) {
    fits.clear();
    notes.clear();
    std::vector<StoredFit> fitted;
    {
      FitProgressPrinter printer(c.terminal);
      fitted = run_fits(data, request, plan, [&](const FitProgress& p) { printer(p); });
    }
    if (store) {
      store.reset();
      store = store::Store::open(store_path, store::Store::Mode::read_write);
      for (size_t i = 0; i < fitted.size(); ++i) {
        const PlannedFit& p = plan.fits[i];
        std::optional<StoredFit> found;
        if (!c.refit) found = find_fit(*store, law_name(p.law), p.scope, p.input_hash);
        if (found && found->guardrails_checked) {
          fits.push_back(std::move(*found));
          notes.push_back(fmt::format("stored fit {} (same data and options)", fits.back().id));
        } else {
          fitted[i].id = insert_fit(*store, fitted[i]);
          notes.push_back(fmt::format("stored as fit {} in {}", fitted[i].id, store_path.string()));
          fits.push_back(std::move(fitted[i]));
        }
      }
    } else {
      fits = std::move(fitted);
      notes.assign(fits.size(), "from " + data.origin + " (not stored)");
    }
  }

  // Paired contrasts over every seed of the store (fit/contrasts.h), stored beside the fits.
  std::optional<ContrastSet> contrasts;
  if (!c.points.empty()) {
    // A points file has no seeds to pair.
  } else {
    if (!store) store = store::Store::open(store_path, store::Store::Mode::read_migrating);
    contrasts = study_contrasts(*store, c.study);
    if (!no_law.empty()) {
      bool any = false;
      for (const ContrastFamily& f : contrasts->families) any = any || !f.tests.empty();
      if (!any) throw NothingToFit(no_law);  // no law and no contrast: nothing at all to do
    }
    std::optional<store::ContrastSetRecord> found = store->find_contrast_set(contrasts->grid, contrasts->input_hash);
    std::string where;
    if (found && !c.refit) {
      contrasts->id = found->id;
      contrasts->created = found->created;
      where = fmt::format("paired contrasts: stored set {} (same runs and families)", found->id);
    } else {
      store.reset();
      store = store::Store::open(store_path, store::Store::Mode::read_write);
      contrasts->created = unix_time_s();
      contrasts->id = store->insert_contrast_set(to_record(*contrasts));
      where = fmt::format("paired contrasts: stored as set {} in {}", contrasts->id, store_path.string());
    }
    if (!c.out.empty()) std::fprintf(stderr, "fp4lab fit: %s\n", where.c_str());
  }

  const ContrastSet* paired = contrasts ? &*contrasts : nullptr;
  std::string text = format_fits(fits, c.format, notes, plan.skipped, paired);
  if (!no_law.empty()) {
    if (c.format == OutputFormat::table) text = "no scaling law fitted: " + no_law + "\n" + format_fits({}, c.format, {}, {}, paired);
    std::fprintf(stderr, "fp4lab fit: no scaling law fitted: %s\n", no_law.c_str());
  }
  if (c.out.empty()) {
    std::fwrite(text.data(), 1, text.size(), stdout);
  } else {
    write_file_atomic(c.out, {text});
    for (const std::string& n : notes) std::fprintf(stderr, "fp4lab fit: %s\n", n.c_str());
    std::fprintf(stderr, "fp4lab fit: wrote %s\n", c.out.string().c_str());
  }
}

}  // namespace fp4::fit
