// test_report_real.cpp — `fp4lab report` on a tiny real CPU study of the first study's shape (four
// TOML files sharing one store: a main grid, a noise floor, an ablation grid with [recipes.*]
// tables, a probe grid; tests/report_test_helpers.h). Each section's numbers are recomputed here
// from the store and compared with the report's CSV and tables: which runs each section selects
// (the main grid for the curves, scaling and gap table; every seed of a main point for the gap's
// spread; runs equal but for their seed for the noise floor; runs equal but for recipe and seed for
// the ablations; probe rows), that a grid not run yet is named as such, which stored fit is drawn,
// that every figure is well-formed SVG, that nothing is referenced outside the file, and that the
// same store gives the same bytes.
#include <catch2/catch.hpp>

#include <fmt/format.h>
#include <sqlite3.h>

#include <cmath>
#include <cstdlib>
#include <map>
#include <set>

#include "fit/contrasts.h"
#include "fit/statistics.h"
#include "fit/stored_fit.h"
#include "fit/trend.h"
#include "reports/escape.h"
#include "reports/format.h"
#include "tests/report_test_helpers.h"

namespace fs = std::filesystem;
using fp4::store::Store;
using fp4::test::HtmlDom;
using fp4::test::ScratchDir;
using fp4::test::table_with_caption;

namespace {

// One SQL value of the store as a double (NaN for NULL).
double sql_double(const Store& store, const std::string& sql) {
  sqlite3_stmt* st = nullptr;
  REQUIRE(sqlite3_prepare_v2(store.handle(), sql.c_str(), -1, &st, nullptr) == SQLITE_OK);
  double v = std::nan("");
  if (sqlite3_step(st) == SQLITE_ROW && sqlite3_column_type(st, 0) != SQLITE_NULL) v = sqlite3_column_double(st, 0);
  sqlite3_finalize(st);
  return v;
}

size_t column(const HtmlDom::TableData& t, const std::string& name) {
  for (size_t c = 0; c < t.header.size(); ++c)
    if (t.header[c] == name) return c;
  FAIL("no column " << name << " in table " << t.caption);
  return 0;
}

// A CSV file as rows of named fields.
std::vector<std::map<std::string, std::string>> csv_records(const fs::path& file) {
  const auto rows = fp4::test::read_csv(fp4::test::slurp(file));
  std::vector<std::map<std::string, std::string>> out;
  REQUIRE(!rows.empty());
  for (size_t i = 1; i < rows.size(); ++i) {
    REQUIRE(rows[i].size() == rows[0].size());
    std::map<std::string, std::string> m;
    for (size_t c = 0; c < rows[0].size(); ++c) m[rows[0][c]] = rows[i][c];
    out.push_back(std::move(m));
  }
  return out;
}
double number(const std::string& s) { return s.empty() ? std::nan("") : std::strtod(s.c_str(), nullptr); }

// What the test knows of each run, from the store alone.
struct Known {
  fp4::store::RunRecord rec;
  double loss = std::nan("");
  double tail = std::nan("");  // the paper's metric: fit::train_tail of its train losses
  std::string same_but_seed, same_but_recipe_and_seed;  // the config without the seeds (and recipe)
  std::set<std::string> grids;
};
std::map<std::string, Known> known_runs(const Store& store) {
  std::map<std::string, Known> out;
  for (const auto& rec : store.runs()) {
    Known k;
    k.rec = rec;
    k.loss = store.final_loss(rec.id).value_or(std::nan(""));
    k.tail = fp4::fit::train_tail(store.metrics(rec.id, "train/loss")).mean;
    nlohmann::json c = nlohmann::json::parse(rec.config_json);
    // A synthetic source has no data_seed (nothing to shuffle); a shuffled one's follows the seed.
    if (c["train"].contains("data_seed")) {
      REQUIRE(c["train"]["data_seed"] == c["train"]["seed"]);
      c["train"].erase("data_seed");
    }
    c["train"].erase("seed");
    k.same_but_seed = c.dump();
    c.erase("recipe");
    k.same_but_recipe_and_seed = c.dump();
    out[rec.id] = k;
  }
  sqlite3_stmt* st = nullptr;
  REQUIRE(sqlite3_prepare_v2(store.handle(), "SELECT gr.run, g.name FROM grid_runs gr JOIN grids g ON g.id = gr.grid",
                             -1, &st, nullptr) == SQLITE_OK);
  while (sqlite3_step(st) == SQLITE_ROW)
    out[reinterpret_cast<const char*>(sqlite3_column_text(st, 0))].grids.insert(
        reinterpret_cast<const char*>(sqlite3_column_text(st, 1)));
  sqlite3_finalize(st);
  return out;
}

// Mean, sample sd and the 95% Student-t interval of a few values (the quantile as fit/statistics.h
// tabulates it, to 4 decimals).
struct Stats {
  double mean = std::nan(""), sd = std::nan(""), lo = std::nan(""), hi = std::nan("");
};
Stats stats(const std::vector<double>& v) {
  Stats s;
  double sum = 0;
  for (double x : v) sum += x;
  s.mean = sum / static_cast<double>(v.size());
  if (v.size() < 2) return s;
  double ss = 0;
  for (double x : v) ss += (x - s.mean) * (x - s.mean);
  s.sd = std::sqrt(ss / static_cast<double>(v.size() - 1));
  const double half = fp4::fit::student_t975(static_cast<int>(v.size()) - 1) * s.sd / std::sqrt(static_cast<double>(v.size()));
  s.lo = s.mean - half;
  s.hi = s.mean + half;
  return s;
}
// Compares a CSV number with the test's own (NaN: the field is empty).
void check_number(const std::string& field, double expected) {
  if (std::isnan(expected)) CHECK(field.empty());
  else CHECK(number(field) == Approx(expected).epsilon(1e-12).margin(1e-15));
}

// The replicate group of `k` among `runs`, seed → run.
std::map<uint64_t, const Known*> seeds_of(const std::map<std::string, Known>& runs, const std::string& same_but_seed) {
  std::map<uint64_t, const Known*> out;
  for (const auto& [id, k] : runs)
    if (k.same_but_seed == same_but_seed) out[k.rec.seed] = &k;
  return out;
}

// The paired relative differences a/b - 1 over the seeds both groups have.
std::vector<double> paired(const std::map<uint64_t, const Known*>& a, const std::map<uint64_t, const Known*>& b) {
  std::vector<double> out;
  for (const auto& [seed, ka] : a)
    if (const auto it = b.find(seed); it != b.end()) out.push_back(ka->loss / it->second->loss - 1);
  return out;
}
// The same on the runs' train-tail losses.
std::vector<double> paired_tail(const std::map<uint64_t, const Known*>& a, const std::map<uint64_t, const Known*>& b) {
  std::vector<double> out;
  for (const auto& [seed, ka] : a)
    if (const auto it = b.find(seed); it != b.end()) out.push_back(ka->tail / it->second->tail - 1);
  return out;
}

struct Report {
  fs::path out;
  std::string html, md, text;
  std::vector<HtmlDom::TableData> tables;
};
Report render(const fp4::test::TinyStudy& study, const fs::path& dir, const std::string& out_name) {
  const std::string args = "'" + study.toml.string() + "'" + (out_name.empty() ? "" : " --out '" + (dir / out_name).string() + "'");
  const fp4::test::CliRun r = fp4::test::run_report(args, dir);
  INFO(r.err);
  REQUIRE(r.exit_code == 0);
  Report rep;
  rep.out = out_name.empty() ? dir / "tiny-report" : dir / out_name;  // the default: <name>-report beside the TOML
  CHECK(r.out == (rep.out / "report.html").string() + "\n");
  rep.html = fp4::test::slurp(rep.out / "report.html");
  rep.md = fp4::test::slurp(rep.out / "report.md");
  REQUIRE(!rep.html.empty());
  REQUIRE(!rep.md.empty());
  HtmlDom dom(rep.html);
  rep.text = dom.text();
  rep.tables = dom.tables();
  return rep;
}

}  // namespace

TEST_CASE("report of a study-shaped store: each section selects its runs and shows the store's numbers",
          "[report][report_real]") {
  ScratchDir dir;
  const fp4::test::TinyStudy study = fp4::test::write_tiny_study(dir.path());

  // ---- Part 1: the main grid and the noise floor have run; the ablation and probe grids have not.
  fp4::test::run_tiny_grid(study.toml);
  fp4::test::run_tiny_grid(study.noise_toml);
  {
    const Report rep = render(study, dir.path(), "partial");
    CHECK(rep.text.find("This study is not finished.") != std::string::npos);
    const auto* grids = table_with_caption(rep.tables, "The study's grids");
    REQUIRE(grids != nullptr);
    REQUIRE(grids->rows.size() == 4);
    CHECK(grids->rows[0][0] == "tiny");  // the main grid first
    for (const auto& row : grids->rows) {
      INFO(row[0]);
      if (row[0] == "tiny-probes") CHECK(row[column(*grids, "no outcome yet")] == "4 (not run yet)");
      if (row[0] == "tiny-ablation") {
        CHECK(row[column(*grids, "in the store")] == "3");  // the main grid's seed-0 runs
        CHECK(row[column(*grids, "no outcome yet")] == "15");
        CHECK(row[column(*grids, "used for")].find("ablations") != std::string::npos);
      }
      if (row[0] == "tiny-noise") CHECK(row[column(*grids, "used for")].find("noise floor") != std::string::npos);
    }
    CHECK(rep.text.find("no grid point has finished runs of an ablation recipe and of its family's full recipe yet") !=
          std::string::npos);
    CHECK(rep.text.find("tiny-ablation (" + study.ablation_toml.string() + "): 3 of 18 runs finished") != std::string::npos);
    CHECK(rep.text.find("Not run yet: the grid tiny-probes (" + study.probes_toml.string() + ") probes 4 runs") !=
          std::string::npos);
    const auto* missing = table_with_caption(rep.tables, "Runs without an outcome yet");
    REQUIRE(missing != nullptr);
    CHECK(missing->rows.size() == 19);
    // The noise floor is there already (the noise-floor grid ran).
    CHECK(table_with_caption(rep.tables, "Seed spread of the final validation loss") != nullptr);
  }

  // ---- Part 2: the whole study.
  fp4::test::run_tiny_grid(study.ablation_toml);
  fp4::test::run_tiny_grid(study.probes_toml);
  const Report rep = render(study, dir.path(), "");
  const fs::path out = rep.out;
  const std::string& html = rep.html;
  const std::string& md = rep.md;
  const std::string& text = rep.text;
  const auto& tables = rep.tables;
  auto store = Store::open(study.store, Store::Mode::read_only);
  const std::map<std::string, Known> runs = known_runs(*store);
  REQUIRE(runs.size() == 51);
  const std::set<std::string> main_recipes = {"bf16", "e2m1", "ufp4", "nvfp4"};
  std::set<std::string> main_ids;
  for (const auto& [id, k] : runs)
    if (k.grids.count("tiny")) main_ids.insert(id);
  REQUIRE(main_ids.size() == 16);

  // Every section, in both formats.
  for (const auto& [id, title] : std::vector<std::pair<std::string, std::string>>{
           {"study", "Study"}, {"grid", "Grid"}, {"data", "Data"}, {"provenance", "Provenance"},
           {"reproduce", "Reproduce"}, {"runs", "Runs"}, {"loss-curves", "Loss curves"}, {"scaling", "Scaling"},
           {"gap-to-bf16", "Gap to BF16"}, {"predicted-at-the-fits-targets", "Predicted at the fit's targets"},
           {"the-papers-reported-gaps", "The paper's reported gaps"}, {"gap-against-compute", "Gap against compute"},
           {"recipe-against-recipe", "Recipe against recipe"},
           {"precision-law", "Precision law"}, {"noise-floor", "Noise floor"},
           {"ablations", "Ablations"}, {"shrinkage-probe", "Shrinkage probe"},
           {"excluded-and-missing-runs", "Excluded and missing runs"}}) {
    INFO(title);
    CHECK(html.find("<section id=\"" + id + "\">") != std::string::npos);
    CHECK(html.find("href=\"#" + id + "\"") != std::string::npos);  // in the table of contents
    CHECK(md.find("# " + title + "\n") != std::string::npos);
  }

  // Figures: each inline SVG and each file is well-formed XML with an <svg> root and no script.
  HtmlDom dom(html);
  const auto figures = dom.elements("figure");
  const auto svgs = fp4::test::inline_svgs(html);
  // Loss curves, gap over training, loss against N and against compute, the noise floor, probe
  // alpha and eta (the fitted figures need fits: none yet).
  const std::vector<std::string> figure_names = {"loss-curves", "gap-over-training", "loss-vs-n", "loss-vs-compute",
                                                 "noise-floor", "probe-alpha", "probe-eta"};
  CHECK(figures.size() == figure_names.size());
  REQUIRE(svgs.size() == figures.size());
  for (const std::string& svg : svgs) {
    std::string error;
    INFO(svg.substr(0, 200));
    CHECK(fp4::test::xml_well_formed(svg, &error));
    INFO(error);
    CHECK(svg.find("<script") == std::string::npos);
    CHECK(svg.find("<path") != std::string::npos);  // gnuplot drew something
  }
  std::set<std::string> ids;
  for (xmlNodePtr n : dom.elements())
    if (const auto id = HtmlDom::attributes(n)["id"]; !id.empty()) {
      INFO("id " << id);
      CHECK(ids.insert(id).second);  // ids unique across the page (figures' ids are prefixed)
    }
  for (const std::string& name : figure_names) {
    const fs::path file = out / "figures" / (name + ".svg");
    REQUIRE(fs::exists(file));
    std::string error;
    CHECK(fp4::test::xml_well_formed(fp4::test::slurp(file), &error));
    INFO(error);
    CHECK(md.find("](figures/" + name + ".svg)") != std::string::npos);
  }
  // Log axes where the issue asks for them: the tick labels gnuplot drew on the loss curves (both
  // axes), on the final loss against N and against compute (both), and on the gap over training's
  // tokens axis lie on a log10 scale, within half a pixel; the gap axis is linear, and the same
  // measure says so (it tells the two scales apart wherever an axis spans more than a factor 3).
  {
    struct AxisScale {
      const char* figure;
      bool x, log;
    };
    for (const AxisScale& a : std::vector<AxisScale>{{"loss-curves", true, true},     {"loss-curves", false, true},
                                                     {"loss-vs-n", true, true},       {"loss-vs-n", false, true},
                                                     {"loss-vs-compute", true, true}, {"loss-vs-compute", false, true},
                                                     {"gap-over-training", true, true},
                                                     {"gap-over-training", false, false}}) {
      INFO(a.figure << (a.x ? " x" : " y") << " axes");
      const std::string svg = fp4::test::slurp(out / "figures" / (std::string(a.figure) + ".svg"));
      int measured = 0;
      for (const auto& axis : fp4::test::svg_axes(svg, a.x)) {
        const double misfit = fp4::test::axis_misfit(axis, a.log);
        if (std::isnan(misfit)) continue;
        ++measured;
        CHECK(misfit < 0.5);
        const double other = fp4::test::axis_misfit(axis, !a.log);
        if (axis.front().second > 0 && axis.back().second > 3 * axis.front().second) CHECK(other > 2);
      }
      CHECK(measured > 0);
    }
  }
  // Every figure's data a click away: its caption ends with a link to its CSV sidecar, which exists
  // (in the HTML and in the Markdown).
  for (xmlNodePtr f : figures) {
    std::vector<std::string> links;
    for (xmlNodePtr n : dom.elements("a"))
      for (xmlNodePtr up = n->parent; up != nullptr; up = up->parent)
        if (up == f) links.push_back(HtmlDom::attributes(n)["href"]);
    INFO(HtmlDom::attributes(f)["id"]);
    REQUIRE(!links.empty());
    CHECK(links.back().size() > 4);
    CHECK(links.back().substr(links.back().size() - 4) == ".csv");
    CHECK(fs::exists(out / links.back()));
    CHECK(HtmlDom::text_of(f).find("Data: " + links.back()) != std::string::npos);
    CHECK(md.find("Data: [" + fp4::reports::markdown_escape(links.back()) + "](" + links.back() + ")") != std::string::npos);
  }
  // Printable: the print styles keep a figure or table on one page and drop the screen's chrome.
  CHECK(html.find("@media print") != std::string::npos);
  CHECK(html.find("figure, .table-wrap, pre { break-inside: avoid; page-break-inside: avoid; }") != std::string::npos);
  // The gap over training states its smoothing window.
  CHECK(text.find("trailing mean over the last 5% of the run's steps (1 step here)") != std::string::npos);
  // Self-contained: no script, nothing loaded from elsewhere; links only to anchors and sidecars.
  CHECK(dom.elements("script").empty());
  CHECK(dom.elements("link").empty());
  CHECK(dom.elements("img").empty());
  CHECK(dom.elements("iframe").empty());
  for (xmlNodePtr n : dom.elements())
    for (const auto& [attr, value] : HtmlDom::attributes(n)) {
      INFO(HtmlDom::element_name(n) << " " << attr << "=" << value);
      CHECK(attr.rfind("on", 0) != 0);  // no event handlers
      if (attr == "src") FAIL("a src attribute");
      if (attr == "href")
        CHECK((value.rfind("#", 0) == 0 ||
               (value.find(':') == std::string::npos && value.find("..") == std::string::npos &&
                fs::exists(out / value))));
    }
  CHECK(html.find("url(http") == std::string::npos);
  CHECK(fp4::test::undocumented_csv_files(out).empty());  // docs/report.md names every sidecar
  CHECK(html.find("@import") == std::string::npos);

  // ---- Runs: every run of every grid, with the store's final loss (CSV bit for bit) and grids.
  const auto* run_table = table_with_caption(tables, "Every run in the store");
  REQUIRE(run_table != nullptr);
  CHECK(run_table->rows.size() == runs.size());
  const auto final_csv = csv_records(out / "final_losses.csv");
  REQUIRE(final_csv.size() == runs.size());
  for (const auto& row : final_csv) {
    INFO(row.at("run"));
    const Known& k = runs.at(row.at("run_id"));
    CHECK(row.at("run") == k.rec.name);
    CHECK(number(row.at("final_loss")) == k.loss);  // %.17g round-trips
    CHECK(row.at("state") == "succeeded");
    std::string grids;
    for (const std::string& g : k.grids) grids += (grids.empty() ? "" : ";") + g;
    CHECK(row.at("grids") == grids);
  }
  for (const auto& [id, k] : runs) {
    bool shown = false;
    for (const auto& row : run_table->rows)
      shown = shown || (row[0] == k.rec.name && row[column(*run_table, "final val. loss")] == fp4::reports::fmt_loss(k.loss));
    INFO(k.rec.name);
    CHECK(shown);
  }
  // curves.csv: the loss rows of the store.
  const auto curves = fp4::test::read_csv(fp4::test::slurp(out / "curves.csv"));
  CHECK(static_cast<double>(curves.size() - 1) ==
        sql_double(*store, "SELECT count(*) FROM metrics WHERE key IN ('train/loss', 'eval/loss', 'eval/bpb')"));

  // ---- The study's grids: points, stored and finished runs per grid, as the store links them.
  const auto* grids = table_with_caption(tables, "The study's grids");
  REQUIRE(grids != nullptr);
  REQUIRE(grids->rows.size() == 4);
  for (const auto& row : grids->rows) {
    INFO(row[0]);
    const double n = sql_double(*store, "SELECT count(*) FROM grid_runs gr JOIN grids g ON g.id = gr.grid WHERE g.name = '" +
                                            row[0] + "'");
    CHECK(row[column(*grids, "points")] == fmt::format("{}", n));
    CHECK(row[column(*grids, "in the store")] == fmt::format("{}", n));
    CHECK(row[column(*grids, "succeeded")] == fmt::format("{}", n));
    CHECK(row[column(*grids, "no outcome yet")] == "0");
  }

  // ---- Loss curves and scaling: the main grid's runs only (no ablation or probe recipe drawn).
  for (const char* name : {"loss-curves", "gap-over-training", "loss-vs-n", "loss-vs-compute"}) {
    const std::string svg = fp4::test::slurp(out / "figures" / (std::string(name) + ".svg"));
    INFO(name);
    for (const char* other : {"ufp4-rht-none", "ufp4-no-sr", "e2m1-clip3", "e2m1-rht-all"}) CHECK(svg.find(other) == std::string::npos);
    for (const char* recipe : {"e2m1", "ufp4", "nvfp4"}) CHECK(svg.find(recipe) != std::string::npos);
  }
  // The gap over training: per main point, the mean over every seed of the trailing-mean gap (the
  // window is 1 step at 2 or 4 steps a run: the train losses' ratio at the last step).
  const auto over_training = csv_records(out / "gap_over_training.csv");
  std::map<std::string, std::map<std::string, std::string>> last_row;  // recipe/N/D → the last step's row
  for (const auto& row : over_training) {
    CHECK(main_recipes.count(row.at("recipe")));
    CHECK(row.at("window_steps") == "1");
    last_row[row.at("recipe") + "/" + row.at("n_params_nonembedding") + "/" + row.at("tokens_D")] = row;
  }
  CHECK(last_row.size() == 12);  // 3 quantized recipes × 2 sizes × 2 lengths

  // ---- The gap table: the main grid's 12 quantized points, each over every seed the store holds
  // of it (the noise floor's at d1, the ablation grid's at L2-d64 and 256 tokens), paired by seed.
  const auto* gap_table = table_with_caption(tables, "Observed gap");
  REQUIRE(gap_table != nullptr);
  CHECK(gap_table->rows.size() == 12);
  const auto gaps_csv = csv_records(out / "gaps.csv");
  REQUIRE(gaps_csv.size() == 12);
  int three_seed_points = 0;
  std::map<std::string, std::vector<fp4::fit::TrendPoint>> trend_points, tail_points;  // recipe → its points with seeds
  for (const auto& row : gaps_csv) {
    INFO(row.at("recipe") << " " << row.at("model") << " " << row.at("tokens"));
    const Known* point = nullptr;
    for (const std::string& id : main_ids) {
      const Known& k = runs.at(id);
      if (k.rec.recipe == row.at("recipe") && std::to_string(k.rec.n_params_nonembedding) == row.at("n_params_nonembedding") &&
          std::to_string(k.rec.tokens) == row.at("tokens"))
        point = &k;
    }
    REQUIRE(point != nullptr);
    const auto seeds = seeds_of(runs, point->same_but_seed);
    std::string bf16_key;
    for (const auto& [id, k] : runs)
      if (k.rec.baseline && k.same_but_recipe_and_seed == point->same_but_recipe_and_seed) bf16_key = k.same_but_seed;
    const std::vector<double> gaps = paired(seeds, seeds_of(runs, bf16_key));
    const Stats g = stats(gaps);
    const bool d1 = point->rec.model == "d1", ablation_point = !d1 && point->rec.tokens == 256 && point->rec.recipe != "nvfp4";
    CHECK(row.at("seeds") == std::to_string(d1 || ablation_point ? 3 : 1));
    CHECK(gaps.size() == (d1 || ablation_point ? 3u : 1u));
    three_seed_points += gaps.size() == 3;
    check_number(row.at("gap_mean"), g.mean);
    check_number(row.at("gap_sd"), g.sd);
    check_number(row.at("gap_seeds_lo"), g.lo);
    check_number(row.at("gap_seeds_hi"), g.hi);
    // The bf16_gap view says the same.
    std::string in;
    for (const auto& [seed, k] : seeds) in += (in.empty() ? "'" : ", '") + k->rec.id + "'";
    CHECK(number(row.at("gap_mean")) ==
          Approx(sql_double(*store, "SELECT avg(gap) FROM bf16_gap WHERE id IN (" + in + ")")).epsilon(1e-12));
    if (gaps.size() >= 2)
      trend_points[row.at("recipe")].push_back(
          {"", std::log10(6.0 * static_cast<double>(point->rec.n_params_nonembedding) * static_cast<double>(point->rec.tokens)),
           gaps, point->rec.model});
    if (gaps.size() >= 2)
      tail_points[row.at("recipe")].push_back(
          {"", std::log10(6.0 * static_cast<double>(point->rec.n_params_nonembedding) * static_cast<double>(point->rec.tokens)),
           paired_tail(seeds, seeds_of(runs, bf16_key)), point->rec.model});
    // The train-loss gap over training ends at the mean of the seeds' last-step ratios (runs of 2
    // or 4 steps: the train tail, a tenth, and the figure's window, 5%, are both the last step).
    const auto& last = last_row.at(row.at("recipe") + "/" + row.at("n_params_nonembedding") + "/" + row.at("tokens"));
    CHECK(last.at("seeds") == row.at("seeds"));
    check_number(row.at("train_gap_mean"), number(last.at("gap")));
    bool shown = false;
    for (const auto& cells : gap_table->rows)
      shown = shown || (cells[0] == row.at("recipe") && cells[column(*gap_table, "seeds")] == row.at("seeds") &&
                        cells[column(*gap_table, "gap (mean ± sd)")].rfind(fp4::reports::fmt_percent(g.mean), 0) == 0);
    CHECK(shown);
  }
  CHECK(three_seed_points == 8);  // 3 recipes × 2 lengths at d1, e2m1 and ufp4 at the ablation point
  // The gap's weighted trend with compute: fit::fit_trend of those points' per-seed gaps (issue 32:
  // each point weighted by its own seed noise), one row per recipe.
  const auto trends_csv = csv_records(out / "gap_trends.csv");
  REQUIRE(trends_csv.size() == 3);
  for (const auto& row : trends_csv) {
    INFO(row.at("recipe"));
    const auto& pts = trend_points.at(row.at("recipe"));
    CHECK(row.at("points") == std::to_string(pts.size()));
    CHECK(pts.size() == (row.at("recipe") == "nvfp4" ? 2u : 3u));
    // d1's two lengths are one size: resampled and left out together.
    CHECK(row.at("sizes") == (row.at("recipe") == "nvfp4" ? "1" : "2"));
    const fp4::fit::Trend tr = fp4::fit::fit_trend(pts, fp4::fit::kTrendReplicates, 0);
    check_number(row.at("slope_per_decade"), tr.weighted.slope);
    check_number(row.at("lo"), tr.weighted.ci.lo);
    check_number(row.at("hi"), tr.weighted.ci.hi);
    check_number(row.at("unweighted_slope"), tr.unweighted_slope);
    CHECK(tr.sizes == std::stoll(row.at("sizes")));
    if (tr.size_bootstrap.known())
      CHECK(number(row.at("size_bootstrap_lo")) == Approx(tr.size_bootstrap.lo).epsilon(1e-9).margin(1e-12));
    else
      CHECK(row.at("size_bootstrap_lo").empty());
    CHECK(number(row.at("seed_bootstrap_hi")) == Approx(tr.seed_bootstrap.hi).epsilon(1e-9).margin(1e-12));
    // The weighted line of the train-tail gaps at the same points.
    const fp4::fit::WeightedLine tail = fp4::fit::fit_trend(tail_points.at(row.at("recipe")), 0).weighted;
    CHECK(row.at("train_points") == std::to_string(pts.size()));
    check_number(row.at("train_slope_per_decade"), tail.slope);
    check_number(row.at("train_lo"), tail.ci.lo);
    check_number(row.at("train_hi"), tail.ci.hi);
  }
  REQUIRE(table_with_caption(tables, "Weighted trend of the observed gap") != nullptr);

  // ---- The noise floor: every group of runs equal but for the seed with two or more finished
  // seeds, from any grid: d1 × 2 lengths × 4 recipes (noise floor), L2-d64 at 256 × 6 (ablation).
  const auto noise = csv_records(out / "noise_floor.csv");
  std::map<std::string, std::map<uint64_t, const Known*>> groups;
  for (const auto& [id, k] : runs) groups[k.same_but_seed][k.rec.seed] = &k;
  size_t expected_groups = 0;
  for (const auto& [key, g] : groups) expected_groups += g.size() >= 2;
  CHECK(expected_groups == 14);
  REQUIRE(noise.size() == expected_groups);
  for (const auto& row : noise) {
    INFO(row.at("recipe") << " " << row.at("model") << " " << row.at("tokens"));
    const std::map<uint64_t, const Known*>* group = nullptr;
    for (const auto& [key, g] : groups)
      if (g.size() >= 2 && g.begin()->second->rec.recipe == row.at("recipe") &&
          std::to_string(g.begin()->second->rec.tokens) == row.at("tokens") &&
          std::to_string(g.begin()->second->rec.n_params_nonembedding) == row.at("n_params_nonembedding"))
        group = &g;
    REQUIRE(group != nullptr);
    std::vector<double> losses;
    for (const auto& [seed, k] : *group) losses.push_back(k->loss);
    const Stats l = stats(losses);
    CHECK(row.at("n_seeds") == std::to_string(losses.size()));
    check_number(row.at("loss_mean"), l.mean);
    check_number(row.at("loss_sd"), l.sd);
    check_number(row.at("loss_rel_sd"), l.sd / l.mean);
    const Known& first = *group->begin()->second;
    if (first.rec.baseline) {
      CHECK(row.at("gap_pairs") == "0");
    } else {
      std::map<uint64_t, const Known*> bf16;
      for (const auto& [id, k] : runs)
        if (k.rec.baseline && k.same_but_recipe_and_seed == first.same_but_recipe_and_seed) bf16[k.rec.seed] = &k;
      const Stats g = stats(paired(*group, bf16));
      check_number(row.at("gap_mean"), g.mean);
      check_number(row.at("gap_lo"), g.lo);
      check_number(row.at("gap_hi"), g.hi);
      // Beside it, the paper's metric: the same pairs' train-tail losses.
      const std::vector<double> tails = paired_tail(*group, bf16);
      const Stats t = stats(tails);
      CHECK(row.at("train_gap_pairs") == std::to_string(tails.size()));
      check_number(row.at("train_gap_mean"), t.mean);
      check_number(row.at("train_gap_sd"), t.sd);
      check_number(row.at("train_gap_lo"), t.lo);
      check_number(row.at("train_gap_hi"), t.hi);
      CHECK(number(row.at("train_gap_mean")) != number(row.at("gap_mean")));
    }
  }

  // ---- Ablations: the ablation grid's point (7 recipes: its 6 and the main grid's nvfp4 seed 0),
  // and the probe grid's point (4 recipes, one seed), each recipe against its family's full recipe
  // paired by seed, beside the paper's Table 2.
  const auto ablation = csv_records(out / "ablation.csv");
  CHECK(ablation.size() == 11);
  const auto* first_table = table_with_caption(tables, "Ablation at L2-d64 (N = ");
  REQUIRE(first_table != nullptr);
  CHECK(first_table->caption.find("D = 256") != std::string::npos);  // the most seeds first
  CHECK(first_table->caption.find("up to 3 seeds") != std::string::npos);
  CHECK(first_table->rows.size() == 7);
  const std::map<std::string, std::string> anchor_of = {{"ufp4-rht-none", "ufp4"}, {"ufp4-no-sr", "ufp4"},
                                                        {"e2m1-clip3", "e2m1"}, {"e2m1-rht-all", "e2m1"}};
  const std::map<std::string, std::string> paper_loss = {{"ufp4", "1.88079"}, {"ufp4-rht-none", "1.89202"}, {"ufp4-no-sr", "1.88535"}};
  int compared = 0;
  for (const auto& row : ablation) {
    INFO(row.at("recipe") << " at " << row.at("tokens"));
    const std::string& recipe = row.at("recipe");
    const Known* example = nullptr;
    for (const auto& [id, k] : runs)
      if (k.rec.recipe == recipe && std::to_string(k.rec.tokens) == row.at("tokens") && k.rec.model == "L2-d64" &&
          (row.at("tokens") == "256" ? !k.grids.count("tiny-probes") : k.grids.count("tiny-probes") != 0))
        example = &k;
    REQUIRE(example != nullptr);
    const auto seeds = seeds_of(runs, example->same_but_seed);
    std::vector<double> losses;
    for (const auto& [seed, k] : seeds) losses.push_back(k->loss);
    CHECK(row.at("seeds") == std::to_string(seeds.size()));
    check_number(row.at("loss_mean"), stats(losses).mean);
    // The gap to BF16 paired by seed, on the final loss and on the train tail (the paper's metric).
    std::map<uint64_t, const Known*> bf16_here;
    for (const auto& [id, k] : runs)
      if (k.rec.baseline && k.same_but_recipe_and_seed == example->same_but_recipe_and_seed) bf16_here[k.rec.seed] = &k;
    if (example->rec.baseline || bf16_here.empty()) {
      CHECK(row.at("train_gap_vs_bf16").empty());
    } else {
      check_number(row.at("gap_vs_bf16"), stats(paired(seeds, bf16_here)).mean);
      const Stats t = stats(paired_tail(seeds, bf16_here));
      check_number(row.at("train_gap_vs_bf16"), t.mean);
      check_number(row.at("train_gap_lo"), t.lo);
      check_number(row.at("train_gap_hi"), t.hi);
    }
    if (const auto p = paper_loss.find(recipe); p != paper_loss.end()) CHECK(number(row.at("paper_loss")) == number(p->second));
    else CHECK(row.at("paper_loss").empty());
    if (const auto a = anchor_of.find(recipe); a != anchor_of.end()) {
      std::map<uint64_t, const Known*> full;
      for (const auto& [id, k] : runs)
        if (k.rec.recipe == a->second && k.same_but_recipe_and_seed == example->same_but_recipe_and_seed) full[k.rec.seed] = &k;
      const Stats d = stats(paired(seeds, full));
      CHECK(row.at("delta_pairs") == std::to_string(seeds.size()));
      check_number(row.at("delta_vs_full"), d.mean);
      check_number(row.at("delta_lo"), d.lo);
      check_number(row.at("delta_hi"), d.hi);
      ++compared;
      if (row.at("tokens") == "256") {
        // No paired contrasts are stored here (no fp4lab fit): the reading names the interval as
        // unadjusted and says no family-wise test backs it.
        for (const auto& cells : first_table->rows)
          if (cells[0] == recipe) {
            const std::string reading = cells[column(*first_table, "reading")];
            const std::string unadjusted = "no adjusted test stored (fp4lab fit STUDY.toml); unadjusted ";
            if (d.lo > 0) CHECK(reading == unadjusted + "interval above 0");
            else if (d.hi < 0) CHECK(reading == unadjusted + "interval below 0");
            else CHECK(reading == unadjusted + "interval holds 0");
            CHECK(row.at("reading") == reading);
            CHECK(row.at("p_holm").empty());
          }
      }
    } else {
      CHECK(row.at("delta_vs_full").empty());
    }
  }
  CHECK(compared == 5);  // rht-none and no-sr and clip3 at 256; rht-none and rht-all at 512
  CHECK(text.find("Noise floor here: the seed spread of the final loss is") != std::string::npos);

  // ---- Probes: the product of eta per run and GEMM, from the store's probe_gemms rows.
  const auto* eta = table_with_caption(tables, "∏ eta");
  REQUIRE(eta != nullptr);
  CHECK(eta->rows.size() == 4);  // the probe grid's 4 recipes
  const auto products = csv_records(out / "eta_products.csv");
  CHECK(products.size() == 12);  // 4 runs × 3 GEMMs
  for (const auto& row : products) {
    INFO(row.at("run") << " " << row.at("gemm"));
    CHECK(runs.at(row.at("run_id")).grids.count("tiny-probes"));
    const double expected = sql_double(
        *store, "SELECT exp(sum(ln(eta))) FROM probe_gemms WHERE run = '" + row.at("run_id") + "' AND gemm = '" +
                    row.at("gemm") + "' AND step = (SELECT max(step) FROM probe_gemms WHERE run = '" + row.at("run_id") + "')");
    CHECK(number(row.at("eta_product")) == Approx(expected).epsilon(1e-12));
  }

  // ---- The header: every grid, the data source and the fingerprint the trainers reported, the
  // commit, the commands (every grid's TOML), the paper's numbers.
  for (const char* name : {"tiny-noise", "tiny-ablation", "tiny-probes"}) CHECK(text.find(name) != std::string::npos);
  CHECK(text.find("synthetic:markov?order=1&vocab=64") != std::string::npos);
  const auto first = runs.begin()->second.rec;
  const std::string head = fp4::test::slurp(fs::path(first.dir) / "metrics.jsonl").substr(0, 2000);
  const auto fingerprint = nlohmann::json::parse(head.substr(0, head.find('\n')))["data_fingerprint"];
  CHECK(text.find(fingerprint.get<std::string>()) != std::string::npos);
  CHECK(first.data_fingerprint == fingerprint.get<std::string>());  // what the report read: the store's
  const auto attempts = store->attempts(first.id);
  REQUIRE(!attempts.empty());
  CHECK(text.find(attempts[0].provenance.git_commit) != std::string::npos);
  // Provenance: the commit with its dirty flag, fp4lab's version, no GPU for a CPU study, the CUDA
  // version, the date of the first attempt.
  CHECK(text.find(attempts[0].provenance.git_commit +
                  (attempts[0].provenance.git_dirty ? " (dirty: uncommitted changes)" : " (clean)")) != std::string::npos);
  const auto* provenance = table_with_caption(tables, "Provenance of the");
  REQUIRE(provenance != nullptr);
  std::map<std::string, std::string> recorded;
  for (const auto& row : provenance->rows) recorded[row.at(0)] = row.at(1);
  CHECK(recorded["fp4lab version"].rfind(attempts[0].provenance.fp4lab_version + " (", 0) == 0);
  CHECK(recorded["GPUs"] == "none (CPU runs)");
  // (A CUDA build records its CUDA version for CPU runs too.)
  const std::string cuda = attempts[0].provenance.cuda_version;
  CHECK(recorded["CUDA"].rfind(cuda.empty() ? "none (CPU runs)" : cuda + " (", 0) == 0);
  double first_start = 0;
  for (const auto& [id, k] : runs)
    for (const auto& a : store->attempts(id))
      if (a.start > 0 && (first_start == 0 || a.start < first_start)) first_start = a.start;
  CHECK(text.find("first attempt started " + fp4::reports::fmt_utc(first_start)) != std::string::npos);
  // The paper's gaps beside ours, with the scale difference stated from the main grid's largest model.
  double largest_n = 0;
  for (const std::string& id : main_ids)
    largest_n = std::max(largest_n, static_cast<double>(runs.at(id).rec.n_params_nonembedding));
  CHECK(text.find("Scale: this study's largest model has " + fp4::reports::fmt_count(largest_n) +
                  " non-embedding parameters") != std::string::npos);
  CHECK(text.find("Reported by the UFP4 paper, not measured here") != std::string::npos);
  for (const auto& toml : study.tomls()) CHECK(text.find("fp4lab sweep run " + toml.string()) != std::string::npos);
  CHECK(text.find("[recipes.e2m1-clip3]") != std::string::npos);  // the TOML text, stored byte for byte
  CHECK(text.find("1.2570%") != std::string::npos);                 // the paper's numbers
  CHECK(text.find("This study is not finished") == std::string::npos);
  CHECK(text.find("No fits in the store.") != std::string::npos);
  CHECK(text.find("No fits in the store: run fp4lab fit STUDY.toml (law \"precision\", the default) for the law's d "
                  "between every pair of 4-bit recipes.") != std::string::npos);
  CHECK(text.find("No run diverged or failed.") != std::string::npos);
  CHECK(text.find("nothing is missing") != std::string::npos);

  // ---- Deterministic: the same store gives the same bytes, wherever the report goes.
  const Report again = render(study, dir.path(), "again");
  CHECK(again.html == html);
  CHECK(again.md == md);
  for (const auto& e : fs::directory_iterator(out))
    if (e.path().extension() == ".csv") CHECK(fp4::test::slurp(again.out / e.path().filename()) == fp4::test::slurp(e.path()));
  // No temporary file left behind by the atomic writes.
  for (const auto& e : fs::recursive_directory_iterator(out)) CHECK(e.path().filename().string().find(".tmp") == std::string::npos);

  // ---- The fits drawn: of the main grid ("tiny", as fp4lab fit study.toml writes it), not a later
  // fit of the same law and scope made of other runs, or of the same runs chosen by another grid.
  store.reset();
  int64_t main_fit_id = 0;
  std::string main_fit_hash;
  {
    auto rw = Store::open(study.store, Store::Mode::read_write);
    auto bf16_fit = [&](double e, const std::string& grid, bool with_other_runs, bool only_d1) {
      fp4::fit::StoredFit f;
      f.law = "chinchilla";
      f.scope = "bf16";
      f.input_hash = fmt::format("test-{}", e);
      f.options.recipes = {"bf16"};
      f.options.data_hash = f.input_hash;
      f.options.grid = grid;
      f.options.source = "store";
      f.created = 1764640000 + e;
      f.point.E = e;
      f.point.A = 400;
      f.point.B = 2000;
      f.point.alpha = 0.35;
      f.point.beta = 0.37;
      for (const char* name : {"E", "A", "B", "alpha", "beta"}) {
        fp4::fit::ParameterEstimate p;
        p.name = name;
        p.value = name == std::string("E") ? e : 1.0;
        f.parameters.push_back(p);
      }
      for (const auto& [id, k] : runs)
        if (k.rec.baseline && (main_ids.count(id) || (with_other_runs && k.grids.count("tiny-ablation"))) &&
            (!only_d1 || k.rec.model == "d1"))
          f.residuals.push_back({id, k.rec.name, "bf16", static_cast<double>(k.rec.n_params_nonembedding),
                                 static_cast<double>(k.rec.tokens), k.loss, k.loss, 0.0});
      f.n_points = static_cast<int64_t>(f.residuals.size());
      return f;
    };
    fp4::fit::insert_fit(*rw, bf16_fit(1.111, "", false, false));  // fp4lab fit --store of the main runs
    const auto main_fit = bf16_fit(3.333, "tiny", false, false);    // fp4lab fit study.toml
    main_fit_id = fp4::fit::insert_fit(*rw, main_fit);
    main_fit_hash = main_fit.input_hash;
    fp4::fit::insert_fit(*rw, bf16_fit(2.222, "", true, false));  // later, of the main and the ablation grid's runs
    fp4::fit::insert_fit(*rw, bf16_fit(4.444, "tiny-noise", false, true));  // later, main runs chosen by another grid
  }
  const Report fitted = render(study, dir.path(), "fitted");
  const auto* params = table_with_caption(fitted.tables, "Fitted parameters");
  REQUIRE(params != nullptr);
  REQUIRE(params->rows.size() == 1);
  CHECK(params->rows[0][column(*params, "E")] == "3.333");
  CHECK(params->rows[0][column(*params, "points")] == "4");
  CHECK(fitted.text.find("Not a fit of the main grid") == std::string::npos);
  const auto* shown = table_with_caption(fitted.tables, "The stored fits this report shows");
  REQUIRE(shown != nullptr);
  REQUIRE(shown->rows.size() == 1);
  CHECK(shown->rows[0][column(*shown, "fit")] == std::to_string(main_fit_id));
  CHECK(shown->rows[0][column(*shown, "grid")] == "tiny");
  CHECK(shown->rows[0][column(*shown, "input hash")] == main_fit_hash.substr(0, 16));
  CHECK(shown->rows[0][column(*shown, "fitted")] == fp4::reports::fmt_utc(1764640000 + 3.333));
  CHECK(shown->rows[0][column(*shown, "not shown")] == "3 others");
  // No precision fit: the law's d says where it comes from.
  CHECK(fitted.text.find("No precision-law fit is stored, and the law's d comes from it") != std::string::npos);

  // Only a fit of some of the main grid's runs, chosen by another grid: shown, and the table says so.
  {
    auto rw = Store::open(study.store, Store::Mode::read_write);
    char* error = nullptr;
    REQUIRE(sqlite3_exec(rw->handle(), "DELETE FROM fits WHERE json_extract(options_json, '$.grid') <> 'tiny-noise'",
                         nullptr, nullptr, &error) == SQLITE_OK);
  }
  const Report subset = render(study, dir.path(), "subset");
  const auto* only = table_with_caption(subset.tables, "The stored fits this report shows");
  REQUIRE(only != nullptr);
  REQUIRE(only->rows.size() == 1);
  CHECK(only->rows[0][column(*only, "grid")] == "tiny-noise");
  CHECK(only->rows[0][column(*only, "why this one")] == "of the main grid's runs only, though not fitted as the grid tiny");
}

TEST_CASE("report on the committed first study: the ablation verdicts follow the Holm-adjusted tests",
          "[report][report_real][paired]") {
  fp4::test::ScratchDir dir;
  if (!fp4::test::copy_committed_study("first-study", dir.path())) {
    WARN("xz not found: skipped");
    return;
  }
  const auto fit = fp4::test::run_fp4lab("fit '" + (dir / "study.toml").string() + "' --plain", dir);
  INFO(fit.err);
  REQUIRE(fit.exit_code == 0);
  const auto report = fp4::test::run_fp4lab(
      "report '" + (dir / "study.toml").string() + "' --out '" + (dir / "report").string() + "'", dir);
  INFO(report.err);
  REQUIRE(report.exit_code == 0);
  // The audit's example: ufp4-rht-wgrad's paired interval at d4 × 25M lies above 0, yet its Holm p
  // in the "variants against their base" family is 0.28: not a finding.
  int read = 0;
  for (const auto& row : csv_records(dir / "report" / "ablation.csv")) {
    if (row.at("p_holm").empty()) continue;
    INFO(row.at("recipe") << " at " << row.at("model") << " " << row.at("tokens") << ": " << row.at("reading"));
    const double p = number(row.at("p_holm"));
    if (p >= 0.05) CHECK(row.at("reading").rfind("not significant after Holm (p = ", 0) == 0);
    else CHECK(row.at("reading").find("(significant after Holm, p = ") != std::string::npos);
    if (row.at("recipe") == "ufp4-rht-wgrad") {
      CHECK(number(row.at("delta_lo")) > 0);  // the unadjusted interval alone would say "worse"
      CHECK(p == Approx(0.28).margin(0.01));
      CHECK(row.at("reading") == fmt::format("not significant after Holm (p = {:.3g})", p));
    }
    ++read;
  }
  CHECK(read == 9);  // the d4 ablation point's nine variants against their full recipe
  const std::string md = fp4::test::slurp(dir / "report" / "report.md");
  CHECK(md.find("interval above 0") == std::string::npos);
}
