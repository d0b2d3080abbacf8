// test_report_safety.cpp — names are data, never markup or commands: a store whose sweep, grid,
// recipe, model and run names, paths, error texts and probe labels hold <script>, quotes, &,
// newlines, Markdown and gnuplot metacharacters (backquotes, @macros, enhanced-text ^_{}, %
// formats) is rendered, and nothing in it is interpreted: the HTML has no element the names did
// not ask for, every name reads back as the same text, gnuplot ran nothing, the Markdown tables
// keep their columns, the CSV fields read back exactly.
#include <catch2/catch.hpp>

#include <algorithm>
#include <sstream>

#include "fit/stored_fit.h"
#include "reports/escape.h"
#include "base/shell_quote.h"
#include "tests/report_test_helpers.h"

namespace fs = std::filesystem;
using fp4::store::RunState;
using fp4::test::HtmlDom;
using fp4::test::ScratchDir;

namespace {

// Each carries every kind of metacharacter; `touch` would leave a file named PWNED* in the scratch
// directory (the working directory of fp4lab report) if anything ran it.
const std::string kEvil =
    "<script>alert('x')</script>\"q\"&amp;'\n#x `touch PWNED1` $(touch PWNED2) @m {b}^2_3 %d%s | *e* [l](h) \\";
const std::string kEvilRecipe = "e<b>v\"il' & `touch PWNED3` %n|r";
const std::string kEvilModel = "m<i>od&el\n'`touch PWNED4`' @x";
const std::string kEvilRun = "run <img src=x onerror=alert(1)> \" ' & \n|a|b|";
const std::string kEvilError = "error: <script>document.write(1)</script> & \"oops\"\nsecond line `touch PWNED5`";
const std::string kEvilLinear = "lin'ear<svg onload=alert(1)>";
const std::string kEvilOther = "o<u>ther\n'`touch PWNED7`' |x| %s";

}  // namespace

TEST_CASE("report safety: hostile names are escaped for HTML, Markdown, CSV and gnuplot", "[report][report_safety]") {
  ScratchDir dir;
  fp4::test::HandStudy h(dir.path(), kEvil);
  const std::string evil_file = (dir / "grid 'x' $(touch PWNED6) <b>.toml").string();
  h.set_file(evil_file);
  const auto b1 = h.add(kEvilRun + "bf16", "bf16", kEvilModel, 50000, 100000, 0, "m1");
  const auto q1 = h.add(kEvilRun + "q", kEvilRecipe, kEvilModel, 50000, 100000, 0, "m1");
  const auto b2 = h.add(kEvil + "-b2", "bf16", "d2 " + kEvil, 90000, 100000, 0, "m2");
  const auto q2 = h.add(kEvil + "-q2", kEvilRecipe, "d2 " + kEvil, 90000, 100000, 0, "m2");
  const auto failed = h.add(kEvil + "-failed", kEvilRecipe, kEvilModel, 50000, 200000, 0, "m3");
  const std::vector<std::string> ids = {b1.id, q1.id, b2.id, q2.id, failed.id};
  h.record();
  h.train(b1, [](int64_t s) { return 3.0 - 0.05 * s; }, RunState::succeeded);
  h.train(q1, [](int64_t s) { return 3.01 - 0.05 * s; }, RunState::succeeded);
  h.train(b2, [](int64_t s) { return 2.9 - 0.05 * s; }, RunState::succeeded);
  h.train(q2, [](int64_t s) { return 2.92 - 0.05 * s; }, RunState::succeeded);
  h.train(failed, [](int64_t s) { return 3.0 - 0.01 * s; }, RunState::failed, kEvilError);
  // Probe rows with a hostile linear name: it reaches a gnuplot title and an HTML table.
  fp4::store::MetricsBatch probes;
  for (int layer = 0; layer < 2; ++layer)
    for (const char* gemm : {"fprop", "dgrad", "wgrad"}) {
      probes.probe_gemms.push_back({10, layer, kEvilLinear, gemm, 0.99, 0.98, 0.99 * 0.98});
      probes.probes.push_back({10, layer, kEvilLinear, std::string(gemm) + "_x", gemm, 0.99, 0.01, 20, -0.01, 0.9, 64, 0});
    }
  h.store().ingest(q1.id, probes, 0);
  // A precision fit of the grid named kEvil that compares the hostile recipe with another: the
  // names reach the fitted laws' figure, the table of the fits shown and Recipe against recipe.
  {
    fp4::fit::StoredFit f;
    f.law = "precision";
    f.scope = "joint";
    f.input_hash = std::string(64, 'a');
    f.options.recipes = {"bf16", kEvilRecipe, kEvilOther};
    f.options.baseline = "bf16";
    f.options.bootstrap = 0;
    f.options.grid = kEvil;
    f.options.source = "store";
    f.point.E = 1.5;
    f.point.A = 400;
    f.point.B = 2000;
    f.point.alpha = 0.35;
    f.point.beta = 0.37;
    f.point.rho_n = {{"bf16", 1.0}, {kEvilRecipe, 0.9}, {kEvilOther, 0.8}};
    f.point.rho_d = {{"bf16", 1.0}, {kEvilRecipe, 0.95}, {kEvilOther, 0.9}};
    for (const auto& p : {b1, q1, b2, q2})
      f.residuals.push_back({p.id, p.name, p.recipe_label, static_cast<double>(p.n_params_nonembedding), 1e5, 3, 3, 0});
    f.n_points = 4;
    fp4::fit::RecipeComparison c;
    c.recipe = kEvilRecipe;
    c.against = kEvilOther;
    c.baseline = "bf16";
    c.observed = {std::nan(""), 2, 1, -0.001, 0.002, {-0.02, 0.018}};
    c.targets.push_back({1.5e9, 1e11, {-0.0011, {}}});
    f.comparisons.push_back(c);
    fp4::fit::insert_fit(h.store(), f);
  }
  h.close();

  const fp4::test::CliRun r = fp4::test::run_report("--store '" + h.store_path().string() + "' --out '" + (dir / "out").string() + "'", dir.path());
  INFO(r.err);
  REQUIRE(r.exit_code == 0);
  const fs::path out = dir / "out";
  const std::string html = fp4::test::slurp(out / "report.html");
  const std::string md = fp4::test::slurp(out / "report.md");

  // Nothing ran: no backquote, $(), or gnuplot system call executed anywhere.
  for (const auto& e : fs::recursive_directory_iterator(dir.path())) {
    INFO(e.path());
    CHECK(e.path().filename().string().find("PWNED") == std::string::npos);
  }
  CHECK_FALSE(fs::exists("PWNED1"));

  // HTML: the only elements are the report's own: no script, no img, no svg beyond the figures,
  // no event handler; and every hostile string reads back as itself (as text).
  HtmlDom dom(html);
  CHECK(dom.elements("script").empty());
  CHECK(dom.elements("img").empty());
  CHECK(dom.elements("b").empty());
  CHECK(dom.elements("i").empty());
  const size_t figures = dom.elements("figure").size();
  CHECK(figures >= 3);  // loss curves, gap over training, probe alpha and eta
  CHECK(dom.elements("svg").size() == figures);
  for (xmlNodePtr n : dom.elements())
    for (const auto& [attr, value] : HtmlDom::attributes(n)) {
      INFO(HtmlDom::element_name(n) << " " << attr);
      CHECK(attr.rfind("on", 0) != 0);
    }
  const std::string text = dom.text();
  // Names shown in tables are one line (a line break becomes a space); code blocks keep them.
  for (const std::string& s : {kEvilRecipe, fp4::reports::one_line(kEvilModel), fp4::reports::one_line(kEvilRun + "q"),
                               fp4::reports::one_line(kEvilError), fp4::reports::one_line(kEvil)}) {
    INFO(s);
    CHECK(text.find(s) != std::string::npos);
  }
  // The raw strings never appear unescaped in the HTML source.
  CHECK(html.find("<script>alert") == std::string::npos);
  CHECK(html.find("<img src=x") == std::string::npos);
  CHECK(html.find("<svg onload") == std::string::npos);

  // The commands to reproduce quote the path for a POSIX shell.
  CHECK(text.find("fp4lab sweep run " + fp4::shell_quote(evil_file)) != std::string::npos);
  CHECK(fp4::shell_quote(evil_file).find("'\\''x'\\''") != std::string::npos);

  // SVG: well-formed, and gnuplot printed the names (legend, titles) as text, not as markup.
  for (const std::string& svg : fp4::test::inline_svgs(html)) {
    std::string error;
    CHECK(fp4::test::xml_well_formed(svg, &error));
    INFO(error);
  }
  bool recipe_in_legend = false;
  for (const auto& e : fs::directory_iterator(out / "figures")) {
    const std::string svg = fp4::test::slurp(e.path());
    std::string error;
    INFO(e.path());
    CHECK(fp4::test::xml_well_formed(svg, &error));
    INFO(error);
    CHECK(svg.find("<script") == std::string::npos);
    recipe_in_legend = recipe_in_legend || svg.find("e&lt;b>v\"il' &amp; `touch PWNED3` %n|r") != std::string::npos;
  }
  CHECK(recipe_in_legend);

  // Markdown: no raw HTML from a name outside fenced code blocks (inside one, GFM shows text as
  // it is: the stored TOML text is there verbatim), and every table row has as many columns as its
  // header.
  CHECK(md.find("&lt;script&gt;alert") != std::string::npos);
  auto unescaped_pipes = [](const std::string& line) {
    int n = 0;
    for (size_t i = 0; i < line.size(); ++i)
      if (line[i] == '|' && (i == 0 || line[i - 1] != '\\')) ++n;
    return n;
  };
  std::istringstream lines(md);
  int header_pipes = -1, table_rows = 0;
  std::string fence;
  for (std::string line; std::getline(lines, line);) {
    INFO(line);
    if (!fence.empty()) {
      if (line == fence) fence.clear();
      continue;
    }
    if (line.rfind("```", 0) == 0) {
      fence = line.substr(0, line.find_first_not_of('`'));
      continue;
    }
    CHECK(line.find("<script") == std::string::npos);
    CHECK(line.find("<img") == std::string::npos);
    CHECK(line.find("<svg") == std::string::npos);
    CHECK(line.find("<b>") == std::string::npos);
    if (line.rfind("|", 0) != 0) {
      header_pipes = -1;
      continue;
    }
    if (header_pipes < 0) header_pipes = unescaped_pipes(line);
    CHECK(unescaped_pipes(line) == header_pipes);
    ++table_rows;
  }
  CHECK(fence.empty());
  CHECK(table_rows > 10);

  // CSV: the names read back exactly, line breaks and quotes included.
  const auto csv = fp4::test::read_csv(fp4::test::slurp(out / "final_losses.csv"));
  std::vector<std::string> names;
  for (size_t i = 1; i < csv.size(); ++i) names.push_back(csv[i][0]);
  for (const std::string& s : {kEvilRun + "q", kEvil + "-failed"})
    CHECK(std::find(names.begin(), names.end(), s) != names.end());
  const std::string probes_csv = fp4::test::slurp(out / "probes.csv");
  CHECK(probes_csv.find(fp4::reports::csv_field(kEvilLinear)) != std::string::npos);
  bool error_listed = false;
  for (const auto& t : dom.tables())
    for (const auto& row : t.rows)
      error_listed = error_listed || (row.size() == 5 && row[4] == fp4::reports::one_line(kEvilError));
  CHECK(error_listed);

  // The fit's names: its grid and the compared recipes, as text in the tables, exact in the CSV.
  CHECK(dom.elements("u").empty());
  bool grid_shown = false, pair_shown = false;
  for (const auto& t : dom.tables())
    for (const auto& row : t.rows) {
      if (t.caption.rfind("The stored fits this report shows", 0) == 0) grid_shown = grid_shown || row.at(3) == fp4::reports::one_line(kEvil);
      if (t.caption.rfind("The precision law's d", 0) == 0)
        pair_shown = pair_shown || row.at(0) == kEvilRecipe + " − " + fp4::reports::one_line(kEvilOther);
    }
  CHECK(grid_shown);
  CHECK(pair_shown);
  const auto shown = fp4::test::read_csv(fp4::test::slurp(out / "fits_shown.csv"));
  REQUIRE(shown.size() == 2);
  CHECK(shown[1][3] == kEvil);
  const auto compared = fp4::test::read_csv(fp4::test::slurp(out / "comparisons.csv"));
  REQUIRE(compared.size() >= 2);
  CHECK(compared[1][1] == kEvilRecipe);
  CHECK(compared[1][2] == kEvilOther);
}

TEST_CASE("report escaping: each format's special characters", "[report][report_safety]") {
  using namespace fp4::reports;
  CHECK(html_escape("<a href=\"x\">'&'</a>") == "&lt;a href=&quot;x&quot;&gt;&#39;&amp;&#39;&lt;/a&gt;");
  CHECK(gnuplot_quote("it's `x` \"y\" @z\nw") == "'it''s `x` \"y\" @z w'");
  CHECK(markdown_escape("a|b *c* _d_ [e](f) <g> & `h` $i$ #j") ==
        "a\\|b \\*c\\* \\_d\\_ \\[e\\](f) &lt;g&gt; &amp; \\`h\\` \\$i\\$ \\#j");
  CHECK(markdown_escape("-lead") == "\\-lead");
  CHECK(markdown_code("a`b") == "``a`b``");
  CHECK(markdown_code("`x") == "`` `x ``");
  CHECK(csv_field("plain") == "plain");
  CHECK(csv_field("a,b") == "\"a,b\"");
  CHECK(csv_field("say \"hi\"\n") == "\"say \"\"hi\"\"\n\"");
  CHECK(one_line("a\nb\tc\x1b") == "a b c ");
}

TEST_CASE("report: gnuplot is a child of fp4lab with no arguments and the whole figure on its standard input",
          "[report][report_safety]") {
  // A stand-in `gnuplot` first on PATH records how it was started (its parent's name, its
  // arguments) and what it read, then hands the same input to the real gnuplot.
  ScratchDir dir;
  std::string real;
  for (const char* d : {"/usr/bin", "/usr/local/bin", "/bin"})
    if (fs::exists(fs::path(d) / "gnuplot")) real = (fs::path(d) / "gnuplot").string();
  REQUIRE(!real.empty());
  fs::create_directories(dir / "bin");
  const fs::path log = dir / "calls.txt", input = dir / "stdin.txt";
  fp4::test::write_script(dir / "bin" / "gnuplot",
                          "#!/bin/sh\n"
                          "printf 'parent=%s args=%s\\n' \"$(cat /proc/$PPID/comm)\" \"$#\" >> '" + log.string() + "'\n"
                          "tee -a '" + input.string() + "' | '" + real + "'\n");
  fp4::test::HandStudy h(dir.path(), "child");
  const auto b = h.add("b", "bf16", "m", 50000, 100000, 0, "m1");
  const auto q = h.add("q", kEvilRecipe, "m", 50000, 100000, 0, "m1");
  h.record();
  h.train(b, [](int64_t s) { return 3.0 - 0.05 * s; }, RunState::succeeded);
  h.train(q, [](int64_t s) { return 3.01 - 0.05 * s; }, RunState::succeeded);
  h.close();
  const std::string cmd = "env PATH='" + (dir / "bin").string() + ":/usr/bin:/bin' '" + std::string(FP4LAB_BINARY) +
                          "' report --store '" + h.store_path().string() + "' --out '" + (dir / "out").string() +
                          "' >'" + (dir / "o.txt").string() + "' 2>'" + (dir / "e.txt").string() + "'";
  const int status = std::system(cmd.c_str());
  INFO(fp4::test::slurp(dir / "e.txt"));
  REQUIRE(WEXITSTATUS(status) == 0);
  const size_t figures = fp4::test::inline_svgs(fp4::test::slurp(dir / "out" / "report.html")).size();
  CHECK(figures >= 3);
  // One start per figure, each by fp4lab itself (no shell between) with no argument at all.
  std::istringstream calls(fp4::test::slurp(log));
  size_t n = 0;
  for (std::string line; std::getline(calls, line); ++n) CHECK(line == "parent=fp4lab args=0");
  CHECK(n == figures);
  // Each figure's whole script, its data as datablocks, came through standard input, the names in it
  // as gnuplot's single-quoted literals.
  const std::string scripts = fp4::test::slurp(input);
  CHECK(fp4::test::count_of(scripts, "set terminal svg") == figures);
  CHECK(scripts.find("$p0s0 << EOD\n") != std::string::npos);
  CHECK(scripts.find(fp4::reports::gnuplot_quote(kEvilRecipe)) != std::string::npos);
  CHECK_FALSE(fs::exists(dir / "PWNED3"));
}
