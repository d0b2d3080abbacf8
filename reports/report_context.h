// report_context.h — what the section builders share while one report is assembled: the study,
// the options, the recipe palette, gnuplot, and the files (CSV sidecars, SVG figures) that the
// report will write. Private to reports/.
#pragma once

#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include "reports/document.h"
#include "reports/palette.h"
#include "reports/plot.h"
#include "reports/report.h"
#include "reports/study.h"

namespace fp4::reports {

struct OutputFile {
  std::string name;     // relative to the output directory
  std::string bytes;
};

class ReportContext {
 public:
  ReportContext(const Study& study, const ReportOptions& options, std::filesystem::path gnuplot);

  const Study& study;
  const ReportOptions& options;
  const Palette palette;

  // Draws `plot` with gnuplot and returns the figure block; the standalone SVG is kept for
  // figures/<id>.svg.
  Figure figure(const std::string& id, const std::string& title, Inline caption, const Plot& plot,
                const std::string& csv);
  // Registers a CSV sidecar (header line and rows already CSV-escaped) and returns its name.
  std::string csv(const std::string& name, const std::vector<std::string>& header,
                  const std::vector<std::vector<std::string>>& rows);

  // A table cell naming a recipe with its colour.
  Cell recipe_cell(const std::string& recipe) const;
  // A series in the recipe's colour, dash and point shape.
  Series recipe_series(const std::string& recipe, SeriesStyle style, std::string title) const;

  const std::vector<OutputFile>& files() const { return files_; }

 private:
  std::filesystem::path gnuplot_;
  std::vector<OutputFile> files_;
};

// The sections, in report order (each builder says what is missing instead of leaving it out).
Section study_section(ReportContext& ctx);
Section runs_section(ReportContext& ctx);
Section curves_section(ReportContext& ctx);
Section scaling_section(ReportContext& ctx);
Section gap_section(ReportContext& ctx);
Section comparison_section(ReportContext& ctx);
Section precision_section(ReportContext& ctx);
Section noise_section(ReportContext& ctx);
Section ablation_section(ReportContext& ctx);
Section probe_section(ReportContext& ctx);
Section excluded_section(ReportContext& ctx);

// The expert load of the MoE runs among `runs` over training (sections_moe.cpp); nothing when none
// of them has routing metrics (a dense study's report is unchanged).
std::optional<Figure> expert_load_figure(ReportContext& ctx, const std::vector<const StudyRun*>& runs);

}  // namespace fp4::reports
