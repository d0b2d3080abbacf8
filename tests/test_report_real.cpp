// test_report_real.cpp — `fp4lab report` on a tiny real CPU study: every section is there, every
// run, the numbers are the store's, every figure is well-formed SVG (inline and as a file), the
// HTML references nothing outside itself, and the same store gives the same bytes twice.
#include <catch2/catch.hpp>

#include <sqlite3.h>

#include <cmath>
#include <cstdlib>
#include <set>

#include "reports/format.h"
#include "tests/report_test_helpers.h"

namespace fs = std::filesystem;
using fp4::sweeps::Store;
using fp4::test::HtmlDom;
using fp4::test::ScratchDir;

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

const HtmlDom::TableData* table_with_caption(const std::vector<HtmlDom::TableData>& tables, const std::string& prefix) {
  for (const auto& t : tables)
    if (t.caption.rfind(prefix, 0) == 0) return &t;
  return nullptr;
}

size_t column(const HtmlDom::TableData& t, const std::string& name) {
  for (size_t c = 0; c < t.header.size(); ++c)
    if (t.header[c] == name) return c;
  FAIL("no column " << name << " in table " << t.caption);
  return 0;
}

}  // namespace

TEST_CASE("report of a tiny real study: every section, every run, the store's numbers, valid SVG",
          "[report][report_real]") {
  ScratchDir dir;
  const fp4::test::TinyStudy study = fp4::test::make_tiny_study(dir.path());
  const fp4::test::CliRun r = fp4::test::run_report("'" + study.toml.string() + "'", dir.path());
  INFO(r.err);
  REQUIRE(r.exit_code == 0);
  const fs::path out = dir / "tiny-report";  // the default: <name>-report beside the TOML
  CHECK(r.out == (out / "report.html").string() + "\n");
  const std::string html = fp4::test::slurp(out / "report.html");
  const std::string md = fp4::test::slurp(out / "report.md");
  REQUIRE(!html.empty());
  REQUIRE(!md.empty());

  // Every section, in both formats.
  for (const auto& [id, title] : std::vector<std::pair<std::string, std::string>>{
           {"study", "Study"}, {"grid", "Grid"}, {"data", "Data"}, {"provenance", "Provenance"},
           {"reproduce", "Reproduce"}, {"runs", "Runs"}, {"loss-curves", "Loss curves"}, {"scaling", "Scaling"},
           {"gap-to-bf16", "Gap to BF16"}, {"predicted-at-the-fits-targets", "Predicted at the fit's targets"},
           {"the-papers-reported-gaps", "The paper's reported gaps"}, {"gap-against-compute", "Gap against compute"},
           {"precision-law", "Precision law"},
           {"ablations", "Ablations"}, {"quantization-probes", "Quantization probes"},
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
  // Loss curves, gap over training, loss against N and against compute, probe alpha and eta (the
  // fitted figures need fits: this store has none).
  CHECK(figures.size() == 6);
  REQUIRE(svgs.size() == figures.size());
  std::set<std::string> ids;
  for (const std::string& svg : svgs) {
    std::string error;
    INFO(svg.substr(0, 200));
    CHECK(fp4::test::xml_well_formed(svg, &error));
    INFO(error);
    CHECK(svg.find("<script") == std::string::npos);
    CHECK(svg.find("<path") != std::string::npos);  // gnuplot drew something
  }
  for (xmlNodePtr n : dom.elements())
    if (const auto id = HtmlDom::attributes(n)["id"]; !id.empty()) {
      INFO("id " << id);
      CHECK(ids.insert(id).second);  // ids unique across the page (figures' ids are prefixed)
    }
  for (const char* name : {"loss-curves", "gap-over-training", "loss-vs-n", "loss-vs-compute", "probe-alpha", "probe-eta"}) {
    const fs::path file = out / "figures" / (std::string(name) + ".svg");
    REQUIRE(fs::exists(file));
    std::string error;
    CHECK(fp4::test::xml_well_formed(fp4::test::slurp(file), &error));
    INFO(error);
    CHECK(md.find("](figures/" + std::string(name) + ".svg)") != std::string::npos);
  }
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
  CHECK(html.find("@import") == std::string::npos);

  // Every run, with the store's final loss, in the table and in the CSV (bit for bit).
  auto store = Store::open(study.store, Store::Mode::read_only);
  const auto runs = store->runs();
  REQUIRE(runs.size() == 20);
  const auto tables = dom.tables();
  const auto* run_table = table_with_caption(tables, "Every run in the store");
  REQUIRE(run_table != nullptr);
  CHECK(run_table->rows.size() == runs.size());
  const size_t loss_col = column(*run_table, "final val. loss"), state_col = column(*run_table, "state");
  const auto csv = fp4::test::read_csv(fp4::test::slurp(out / "final_losses.csv"));
  REQUIRE(csv.size() == runs.size() + 1);
  for (const auto& run : runs) {
    INFO(run.name);
    const auto loss = store->final_loss(run.id);
    REQUIRE(loss.has_value());
    bool found = false;
    for (const auto& row : run_table->rows)
      if (row[0] == run.name) {
        found = true;
        CHECK(row[loss_col] == fp4::reports::fmt_loss(*loss));
        CHECK(row[state_col] == "succeeded");
      }
    CHECK(found);
    bool in_csv = false;
    for (const auto& row : csv)
      if (row.size() > 14 && row[1] == run.id) {
        in_csv = true;
        CHECK(row[0] == run.name);
        CHECK(std::strtod(row[14].c_str(), nullptr) == *loss);  // %.17g round-trips
      }
    CHECK(in_csv);
    CHECK(md.find(run.name) != std::string::npos);
  }

  // curves.csv holds every metric row of the store.
  const auto curves = fp4::test::read_csv(fp4::test::slurp(out / "curves.csv"));
  CHECK(static_cast<double>(curves.size() - 1) == sql_double(*store, "SELECT count(*) FROM metrics"));

  // The gap table: each row's mean gap is the bf16_gap view's mean over seeds.
  const auto* gap_table = table_with_caption(tables, "Observed gap");
  REQUIRE(gap_table != nullptr);
  CHECK(gap_table->rows.size() == 12);  // 3 quantized recipes × 2 models × 2 lengths
  const size_t gap_col = column(*gap_table, "gap (mean ± sd)"), seeds_col = column(*gap_table, "seeds");
  const auto gaps_csv = fp4::test::read_csv(fp4::test::slurp(out / "gaps.csv"));
  REQUIRE(gaps_csv.size() == gap_table->rows.size() + 1);
  for (size_t i = 1; i < gaps_csv.size(); ++i) {
    const auto& row = gaps_csv[i];
    INFO(row[0] << " " << row[2] << " " << row[3]);
    const double expected = sql_double(*store, "SELECT avg(gap) FROM bf16_gap WHERE recipe = '" + row[0] +
                                                   "' AND n_params_nonembedding = " + row[2] + " AND tokens = " + row[3]);
    CHECK(std::strtod(row[7].c_str(), nullptr) == Approx(expected).epsilon(1e-12));
    bool shown = false;
    for (const auto& cells : gap_table->rows)
      if (cells[0] == row[0] && cells[gap_col].rfind(fp4::reports::fmt_percent(expected), 0) == 0 &&
          cells[seeds_col] == row[4])
        shown = true;
    CHECK(shown);
  }
  CHECK(gaps_csv[1].size() == 16);
  // ufp4 at d1, 256 tokens has three seeds: mean ± sd.
  bool three_seeds = false;
  for (const auto& cells : gap_table->rows)
    three_seeds = three_seeds || (cells[0] == "ufp4" && cells[seeds_col] == "3" && cells[gap_col].find(" ± ") != std::string::npos);
  CHECK(three_seeds);

  // The header: both grids, the data source and the fingerprint the trainers reported, the commit.
  const std::string text = dom.text();
  CHECK(text.find("tiny-noise") != std::string::npos);
  CHECK(text.find("synthetic:markov?order=1&vocab=64&branch=4&seed=1") != std::string::npos);
  const std::string first_line = fp4::test::slurp(fs::path(runs[0].dir) / "metrics.jsonl").substr(0, 2000);
  const auto fingerprint = nlohmann::json::parse(first_line.substr(0, first_line.find('\n')))["data_fingerprint"];
  CHECK(text.find(fingerprint.get<std::string>()) != std::string::npos);
  const auto attempts = store->attempts(runs[0].id);
  REQUIRE(!attempts.empty());
  CHECK(text.find(attempts[0].provenance.git_commit) != std::string::npos);
  CHECK(text.find("fp4lab sweep run " + study.toml.string()) != std::string::npos);
  CHECK(text.find("[recipes.ufp4-no-rht]") != std::string::npos);  // the TOML text, stored byte for byte
  CHECK(text.find("1.2570%") != std::string::npos);                 // the paper's numbers
  CHECK(text.find("This study is not finished") == std::string::npos);
  CHECK(text.find("No fits in the store.") != std::string::npos);

  // Ablations: ufp4-no-rht beside the paper's "no RHT" row, with a measured noise floor.
  const auto* ablation = table_with_caption(tables, "Ablation at d1");
  REQUIRE(ablation != nullptr);
  bool no_rht = false;
  for (const auto& cells : ablation->rows)
    no_rht = no_rht || (cells[0] == "ufp4-no-rht" && cells[column(*ablation, "paper loss")] == "1.89202");
  CHECK(no_rht);
  CHECK(text.find("Noise floor: the seed spread of the final loss is") != std::string::npos);

  // Probes: the product of eta per recipe, from the store's probe_gemms rows.
  const auto* eta = table_with_caption(tables, "∏ eta");
  REQUIRE(eta != nullptr);
  CHECK(eta->rows.size() == 6);  // 3 quantized recipes × 2 models

  // Nothing excluded, nothing missing.
  CHECK(text.find("No run diverged or failed.") != std::string::npos);
  CHECK(text.find("nothing is missing") != std::string::npos);

  // Deterministic: the same store gives the same bytes, wherever the report goes.
  const fp4::test::CliRun again = fp4::test::run_report("'" + study.toml.string() + "' --out '" + (dir / "again").string() + "'", dir.path());
  REQUIRE(again.exit_code == 0);
  CHECK(fp4::test::slurp(dir / "again" / "report.html") == html);
  CHECK(fp4::test::slurp(dir / "again" / "report.md") == md);
  // No temporary file left behind by the atomic writes.
  for (const auto& e : fs::recursive_directory_iterator(out)) CHECK(e.path().filename().string().find(".tmp") == std::string::npos);
}
