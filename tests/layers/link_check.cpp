// link_check.cpp — a program linked from fp4lab_fit and fp4lab_reports alone (and what they link:
// store, base and third-party libraries), so that a symbol of the engine or the sweeps reached
// from either fails the build. It calls the two libraries' entry points, which pull in their
// objects; run, it says so and exits 0.
#include <cstdio>

#include "fit/fit_study.h"
#include "reports/report.h"

int main(int argc, char**) {
  // Never taken (argc is at least 1): the calls are here for the linker, not to run.
  if (argc == 0) {
    fp4::fit::fit_study(fp4::fit::FitCommand{});
    fp4::reports::report_study(nullptr, "", {});
  }
  std::printf("fp4lab_fit and fp4lab_reports link without the engine\n");
  return 0;
}
