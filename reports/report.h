// report.h — `fp4lab report`: one study's store (and the fits stored in it) rendered as
//   OUT/report.html   one self-contained file (inline CSS and SVG, no script, nothing fetched)
//   OUT/report.md     the same content as GitHub-flavoured Markdown, figures from OUT/figures/
//   OUT/figures/*.svg the figures, drawn by gnuplot
//   OUT/*.csv         the data behind every figure and table (docs/report.md lists the columns)
// Each file is written to a temporary name and renamed into place. A study still running gives a
// report of what has finished that names what is missing; an empty store, a store without fits,
// runs without a BF16 twin: each section says what it lacks and why.
#pragma once

#include <filesystem>
#include <string>
#include <vector>

#include "reports/study.h"
#include "store/grid_record.h"
#include "store/store.h"

namespace fp4::reports {

struct ReportOptions {
  std::filesystem::path out_dir;      // required by write_report; report_study defaults it
  // The trailing window (in training steps) over which the train loss is averaged for the gap
  // over training (the figure; the gap table's train-loss gap is fit::train_tail's, the paper's
  // metric as the contrasts take it); 0: 5% of each run's steps, at least 1.
  int smooth_steps = 0;
  std::string gnuplot = "gnuplot";    // the program, found on PATH unless it contains a '/'
  // How the report names the study in its commands to reproduce it: the TOML path as the user
  // gave it, or the store's.
  std::string spec_argument, store_argument;
};

struct ReportFiles {
  std::filesystem::path html, markdown;
  std::vector<std::filesystem::path> written;  // every file, report.html last
};

// `store` may be null when the study names a store that does not exist yet (nothing has run);
// `declared` is the study its TOML declares (with the grids beside it), or null with --store.
// Throws fp4::UserError when gnuplot is missing or the output directory cannot be made.
ReportFiles write_report(const store::Store* store, const store::DeclaredStudy* declared, const ReportOptions& options);

// `fp4lab report`: opens the study's store read-only — with `declared`, its main grid's [sweep]
// store, which may not exist yet; without, `store_path`, which must (a UserError says so) — and
// writes the report, into options.out_dir or, when that is empty, the default directory.
ReportFiles report_study(const store::DeclaredStudy* declared, const std::filesystem::path& store_path,
                         ReportOptions options);

// The default output directory: <TOML directory>/<sweep name>-report, or <store directory>/<store
// stem>-report.
std::filesystem::path default_report_dir(const store::DeclaredStudy* declared, const std::filesystem::path& store);

}  // namespace fp4::reports
