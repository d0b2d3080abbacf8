// study.h — a study read once per command: the TOML given, parsed and expanded (what the sweep
// commands run), and the same grid with the grids beside it as plain records (store/grid_record.h),
// which `fp4lab fit` and `fp4lab report` take. Nothing else in fp4lab reads a study's TOML.
#pragma once

#include <filesystem>

#include "store/grid_record.h"
#include "sweeps/spec.h"

namespace fp4::sweeps {

struct Study {
  SweepSpec spec;                  // the TOML given
  store::DeclaredStudy declared;   // the same grid, and the grids beside it when asked for
};

// The TOMLs beside the one given that belong to its study: every other TOML in its directory whose
// [sweep] store is the same file (results/first-study/). `siblings::skip` reads none (the sweep
// commands and `fp4lab fit` need only the grid given); an unreadable TOML beside it is listed in
// declared.unreadable, not fatal: it may not be a sweep at all.
enum class Siblings : bool { skip, read };

// Reads the study's TOML (an unreadable or invalid one is a UserError, sweeps/spec.h).
Study read_study(const std::filesystem::path& toml, DataCheck check, Siblings siblings);

}  // namespace fp4::sweeps
