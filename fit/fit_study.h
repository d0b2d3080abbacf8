// fit_study.h — `fp4lab fit`'s workflow (docs/fit.md): the options, from the study's [fit] table
// under the command's flags; the data, from the store (the study's grid, or every run) or a CSV;
// the stored fits found again, or fitted and stored; the output. cli/ only turns arguments into a
// FitCommand.
#pragma once

#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include "fit/contrasts.h"
#include "fit/fit_output.h"
#include "fit/fitter.h"
#include "fit/laws.h"
#include "fit/stored_fit.h"
#include "store/grid_record.h"

namespace fp4::fit {

struct FitCommand {
  // Exactly one source: a study (its grid's runs, from its store, as its [fit] table asks), every
  // run of a store, or a CSV of points (nothing is stored).
  const store::DeclaredStudy* study = nullptr;
  std::filesystem::path store, points;
  // The flags: each set one overrides the [fit] table's value, which overrides FitRequest's default.
  std::vector<Law> laws;
  std::vector<std::string> recipes;    // fit only these (empty: all)
  std::vector<Target> targets;
  std::optional<std::string> n_kind;
  std::optional<int64_t> bootstrap;
  std::optional<uint64_t> seed;
  std::optional<double> huber_delta;
  bool gamma = false;
  bool refit = false;                  // fit again even when the store holds the same fit
  int threads = 0;
  OutputFormat format = OutputFormat::table;
  std::filesystem::path out;           // "" : stdout
  bool terminal = false;               // progress as one redrawn line (else a line per finished stage)
};

// A UserError unless exactly one source is given (checked before the study is read, and again by
// fit_study).
void require_one_source(bool study, bool store, bool points);

// The request the table and the flags make (FitCommand's order of precedence).
FitRequest fit_request(const store::FitTable& table, const FitCommand& command, std::string& n_kind);

// The paired contrasts of a study's store (its [compare] table, else the defaults, from its main
// grid's recipes and its grids' recipe bases), or of every run of a store (study null).
ContrastSet study_contrasts(const store::Store& store, const store::DeclaredStudy* study);

// Runs the command: prints or writes the output, says on stderr what was skipped and where fits
// were stored. A user's mistake is a fp4::UserError.
void fit_study(const FitCommand& command);

}  // namespace fp4::fit
