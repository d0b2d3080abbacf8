// report.cpp — see report.h: assembles the Document from the sections, then writes every file
// atomically (figures and CSV first, report.md, report.html last).
#include "reports/report.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <memory>
#include <system_error>

#include "base/user_error.h"
#include "base/files.h"
#include "reports/escape.h"
#include "reports/format.h"
#include "reports/gnuplot.h"
#include "reports/html_writer.h"
#include "reports/markdown_writer.h"
#include "reports/report_context.h"
#include "reports/svg.h"

namespace fp4::reports {

ReportContext::ReportContext(const Study& s, const ReportOptions& o, std::filesystem::path gnuplot)
    : study(s), options(o), palette(s.recipes()), gnuplot_(std::move(gnuplot)) {}

Figure ReportContext::figure(const std::string& id, const std::string& title, Inline caption, const Plot& plot,
                             const std::string& csv) {
  const std::string svg = run_gnuplot(gnuplot_, gnuplot_script(plot), "figure " + id);
  Figure f;
  f.id = id;
  f.title = title;
  f.caption = std::move(caption);
  f.svg_inline = svg_for_inline(svg, "figure-" + id, title);
  f.svg_file = "figures/" + id + ".svg";
  f.csv = csv;
  files_.push_back({f.svg_file, svg});
  return f;
}

std::string ReportContext::csv(const std::string& name, const std::vector<std::string>& header,
                               const std::vector<std::vector<std::string>>& rows) {
  std::vector<std::string> fields;
  for (const std::string& h : header) fields.push_back(csv_field(h));
  std::string text = fmt::format("{}", fmt::join(fields, ",")) + "\n";
  for (const auto& row : rows) text += fmt::format("{}", fmt::join(row, ",")) + "\n";
  files_.push_back({name, std::move(text)});
  return name;
}

Cell ReportContext::recipe_cell(const std::string& recipe) const { return {recipe, palette.style(recipe).color}; }

Series ReportContext::recipe_series(const std::string& recipe, SeriesStyle style, std::string title) const {
  const RecipeStyle rs = palette.style(recipe);
  Series s;
  s.title = std::move(title);
  s.color = rs.color;
  s.dash = rs.dash;
  s.point = rs.point;
  s.style = style;
  return s;
}

std::filesystem::path default_report_dir(const store::DeclaredStudy* declared, const std::filesystem::path& store) {
  if (declared != nullptr) return declared->main.base_dir / (declared->main.name + "-report");
  return store.parent_path() / (store.stem().string() + "-report");
}

ReportFiles report_study(const store::DeclaredStudy* declared, const std::filesystem::path& store_path,
                         ReportOptions options) {
  std::unique_ptr<store::Store> store;
  const std::filesystem::path path = declared != nullptr ? declared->main.store : store_path;
  if (declared != nullptr) {
    store = store::Store::open(path, store::Store::Mode::read_if_present);
  } else {
    if (!std::filesystem::exists(path))
      throw UserError("report: " + path.string() + ": no such store; name a study's .db file, or its TOML");
    store = store::Store::open(path, store::Store::Mode::read_only);
  }
  if (options.out_dir.empty()) options.out_dir = default_report_dir(declared, path);
  return write_report(store.get(), declared, options);
}

ReportFiles write_report(const store::Store* store, const store::DeclaredStudy* declared, const ReportOptions& options) {
  if (options.out_dir.empty()) throw std::logic_error("write_report: no output directory");
  // Before anything else: without gnuplot there is no report, and the user can fix that.
  const std::filesystem::path gnuplot = find_gnuplot(options.gnuplot);
  const Study study = load_study(store, declared);
  ReportContext ctx(study, options, gnuplot);

  Document doc;
  doc.title = "fp4lab study report: " + one_line(study.name);
  doc.subtitle = {text("What was run, what each 4-bit recipe costs against BF16, the fitted laws with their 95% "
                       "intervals, and the UFP4 paper's numbers beside ours. Written by fp4lab " FP4LAB_VERSION
                       " from the store ")};
  doc.subtitle.push_back(code(study.store_path.empty() ? std::string("(none yet)") : study.store_display));
  doc.subtitle.push_back(text("."));
  doc.sections.push_back(study_section(ctx));
  doc.sections.push_back(runs_section(ctx));
  doc.sections.push_back(curves_section(ctx));
  doc.sections.push_back(scaling_section(ctx));
  doc.sections.push_back(gap_section(ctx));
  doc.sections.push_back(comparison_section(ctx));
  doc.sections.push_back(precision_section(ctx));
  doc.sections.push_back(noise_section(ctx));
  doc.sections.push_back(ablation_section(ctx));
  doc.sections.push_back(probe_section(ctx));
  doc.sections.push_back(excluded_section(ctx));

  const std::string html = write_html(doc);
  const std::string markdown = write_markdown(doc);

  std::error_code ec;
  std::filesystem::create_directories(options.out_dir / "figures", ec);
  if (ec)
    throw UserError("cannot create the report directory " + (options.out_dir / "figures").string() + ": " +
                    ec.message() + "; pass --out DIR somewhere writable");
  ReportFiles out;
  auto put = [&](const std::string& name, const std::string& bytes) {
    const std::filesystem::path path = options.out_dir / name;
    write_file_atomic(path, {bytes});
    out.written.push_back(path);
  };
  for (const OutputFile& f : ctx.files()) put(f.name, f.bytes);
  put("report.md", markdown);
  put("report.html", html);
  out.markdown = options.out_dir / "report.md";
  out.html = options.out_dir / "report.html";
  return out;
}

}  // namespace fp4::reports
