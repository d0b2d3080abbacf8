// fit_bench.cpp — the fitter's speed on the benchmark: 100 runs × 4 recipes (bf16, e2m1,
// ufp4, nvfp4 on a 10 N × 10 D grid, one seed), losses from a known precision law with 0.3%
// multiplicative noise, fitted with chinchilla per recipe + precision jointly, 1000 bootstrap
// replicates. Prints the wall time of every stage and the total (bench/RESULTS.md "Fits").
//
//   fp4lab_bench_fit [--threads T] [--bootstrap K] [--csv FILE]
//
// --csv also writes the points, so that `fp4lab fit --points FILE` can be timed end to end.
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <map>
#include <string>

#include "fit/fit_data.h"
#include "fit/fitter.h"
#include "fit/laws.h"
#include "fit/parallel.h"
#include "fit/synthetic_data.h"

namespace {

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

fp4::fit::FitData bench_data() {
  fp4::fit::SyntheticGrid g;
  g.truth.E = 1.69;  // Hoffmann et al.'s published values, as a plausible law
  g.truth.A = 406.4;
  g.truth.B = 410.7;
  g.truth.alpha = 0.34;
  g.truth.beta = 0.28;
  g.rho = {{"bf16", {1.0, 1.0}}, {"e2m1", {0.80, 0.90}}, {"ufp4", {0.85, 0.93}}, {"nvfp4", {0.82, 0.92}}};
  for (int i = 0; i < 10; ++i) g.n.push_back(1e6 * std::pow(10.0, i / 3.0));
  for (int j = 0; j < 10; ++j) g.d.push_back(2e7 * std::pow(10.0, j / 4.0));
  g.noise = 0.003;
  g.seed = 20260612;
  return fp4::fit::synthetic_data(g);
}

}  // namespace

int main(int argc, char** argv) {
  fp4::fit::FitRequest request;
  request.laws = {fp4::fit::Law::chinchilla, fp4::fit::Law::precision};
  std::string csv;
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--threads") == 0 && i + 1 < argc) request.threads = std::atoi(argv[++i]);
    else if (std::strcmp(argv[i], "--bootstrap") == 0 && i + 1 < argc) request.bootstrap = std::atoll(argv[++i]);
    else if (std::strcmp(argv[i], "--csv") == 0 && i + 1 < argc) csv = argv[++i];
    else {
      std::fprintf(stderr, "usage: fp4lab_bench_fit [--threads T] [--bootstrap K] [--csv FILE]\n");
      return 2;
    }
  }
  const fp4::fit::FitData data = bench_data();
  if (!csv.empty()) {
    std::ofstream out(csv);
    out << "recipe,n,d,loss\n";
    char line[128];
    for (const auto& p : data.points) {
      std::snprintf(line, sizeof line, "%s,%.17g,%.17g,%.17g\n", p.recipe.c_str(), p.n, p.d, p.loss);
      out << line;
    }
  }
  const auto t0 = std::chrono::steady_clock::now();
  const auto plan = fp4::fit::plan_fits(data, request);
  std::map<std::string, double> stage_end;
  std::vector<std::string> order;
  const auto fits = fp4::fit::run_fits(data, request, plan, [&](const fp4::fit::FitProgress& p) {
    if (p.done != p.total) return;
    if (!stage_end.count(p.stage)) order.push_back(p.stage);
    stage_end[p.stage] = seconds_since(t0);
  });
  const double total = seconds_since(t0);
  std::printf("fp4lab_bench_fit: %zu points (%zu recipes), bootstrap %lld, threads %d\n", data.points.size(),
              data.recipes.size(), static_cast<long long>(request.bootstrap),
              fp4::fit::resolve_threads(request.threads));
  double last = 0;
  for (const std::string& s : order) {
    std::printf("  %-44s %7.2f s\n", s.c_str(), stage_end[s] - last);
    last = stage_end[s];
  }
  std::printf("  %-44s %7.2f s\n", "assembling", total - last);
  std::printf("  %-44s %7.2f s\n", "total", total);
  for (const auto& f : fits)
    if (f.law == "precision")
      for (const auto& p : f.parameters)
        if (p.name == "rho_N" && p.recipe != "bf16")
          std::printf("  rho_N %-6s %.4f [%.4f, %.4f]\n", p.recipe.c_str(), p.value, p.ci.lo, p.ci.hi);
  return 0;
}
