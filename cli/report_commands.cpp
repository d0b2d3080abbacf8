// report_commands.cpp — `fp4lab report STUDY.toml | --store FILE.db [--out DIR]` (docs/report.md).
#include <iostream>
#include <limits>
#include <memory>
#include <optional>
#include <string>

#include "base/user_error.h"
#include "cli/commands.h"
#include "cli/number_options.h"
#include "reports/report.h"
#include "sweeps/study.h"

namespace fp4::cli {

namespace {
struct ReportCliOptions {
  std::string spec, store, out;
  int smooth_steps = 0;
};
}  // namespace

void register_report_commands(CLI::App& app) {
  auto o = std::make_shared<ReportCliOptions>();
  CLI::App* report = app.add_subcommand(
      "report",
      "Write a study's report: report.html (one self-contained file), report.md, figures/*.svg and CSV sidecars "
      "(docs/report.md); safe while a sweep runs");
  report->add_option("spec", o->spec, "The study's TOML file (its store is [sweep] store)");
  report->add_option("--store", o->store, "The store, instead of a TOML file");
  report->add_option("--out", o->out, "Output directory (default: <name>-report beside the TOML or the store)");
  report->add_option("--smooth-steps", o->smooth_steps,
                     "Trailing window (training steps) of the train-loss mean in the gap over training "
                     "(default 0: 5% of each run's steps)")
      ->check(whole_number(0, std::numeric_limits<int>::max()));
  report->callback([o] {
    if (o->spec.empty() == o->store.empty())
      throw UserError("report: give exactly one of STUDY.toml or --store FILE.db");
    std::optional<sweeps::Study> study;
    if (!o->spec.empty()) study = sweeps::read_study(o->spec, sweeps::DataCheck::plan, sweeps::Siblings::read);
    reports::ReportOptions r;
    r.out_dir = o->out;
    r.smooth_steps = o->smooth_steps;
    r.spec_argument = o->spec;
    r.store_argument = o->store;
    const reports::ReportFiles files = reports::report_study(study ? &study->declared : nullptr, o->store, r);
    std::cout << files.html.string() << "\n";
  });
}

}  // namespace fp4::cli
