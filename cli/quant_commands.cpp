// quant_commands.cpp — `fp4lab quant probe`: options in, quant/quantizer_probe out. No logic here
// beyond turning option strings into a ProbeConfig (the engine's parsers do the checking) and
// showing progress on a terminal.
#include <unistd.h>

#include <cstdio>
#include <limits>
#include <memory>
#include <string>
#include <vector>

#include "cli/commands.h"
#include "cli/number_options.h"
#include "quant/quantizer_probe.h"

namespace fp4::cli {

namespace {

struct ProbeOptions {
  std::vector<std::string> dists, grids, scales, rhts, methods;
  double nu = 3.0;
  double outlier_rate = 1e-3;
  double outlier_scale = 20.0;
  int block = 16;
  int rows = 1024;
  int cols = 4096;
  uint64_t seed = 0;
  std::string input;
  std::string format = "table";
  std::string table = "both";
};

template <typename T, typename Parse>
void parse_list(const std::vector<std::string>& texts, std::vector<T>& out, Parse parse) {
  if (texts.empty()) return;  // keep the engine's default: all of them
  out.clear();
  for (const std::string& t : texts) out.push_back(parse(t));
}

void run_probe(const ProbeOptions& o) {
  quant::ProbeConfig c;
  parse_list(o.dists, c.dists, quant::parse_dist);
  parse_list(o.grids, c.grids, quant::parse_grid);
  parse_list(o.scales, c.scales, quant::parse_scale);
  parse_list(o.rhts, c.rht, quant::parse_rht);
  if (!o.methods.empty()) {  // "all" stands for several
    c.methods.clear();
    for (const std::string& t : o.methods)
      for (quant::Method m : quant::parse_method(t)) c.methods.push_back(m);
  }
  c.params.nu = o.nu;
  c.params.outlier_rate = o.outlier_rate;
  c.params.outlier_scale = o.outlier_scale;
  c.block = o.block;
  c.rows = o.rows;
  c.cols = o.cols;
  c.seed = o.seed;
  c.input = o.input;
  // Parse the output choices before the work, so a typo costs nothing.
  const quant::Format format = quant::parse_format(o.format);
  const quant::Tables tables = quant::parse_tables(o.table);
  quant::validate(c);

  quant::ProgressFn progress;
  if (isatty(STDERR_FILENO)) {
    progress = [](int done, int total, const std::string& what) {
      if (what.empty())
        std::fprintf(stderr, "\r\033[K");
      else
        std::fprintf(stderr, "\r\033[K[%d/%d] %s", done, total, what.c_str());
      std::fflush(stderr);
    };
  }
  const quant::ProbeResult result = quant::run_probe(c, progress);
  const std::string text = quant::format(result, format, tables);
  std::fwrite(text.data(), 1, text.size(), stdout);
}

}  // namespace

void register_quant_commands(CLI::App& app) {
  CLI::App* quant = app.add_subcommand("quant", "the 4-bit quantizer: measure what it does to a tensor");
  quant->require_subcommand(1);

  auto o = std::make_shared<ProbeOptions>();
  CLI::App* probe = quant->add_subcommand(
      "probe",
      "quantize synthetic or real tensors with every grid x scale mode x RHT setting and print alpha, "
      "shrink, nmse, sqnr_db and b_eff (NUMERICS.md section 8), plus the per-level rounding error");
  auto* dist = probe->add_option("--dist", o->dists,
                                 "distributions, repeatable or comma-separated: gaussian, laplace, student-t, "
                                 "outliers, uniform-bins (default: all)")
                   ->delimiter(',');
  probe->add_option("--nu", o->nu, "student-t degrees of freedom")->capture_default_str()->check(real_number(0.5, 1e9));
  probe->add_option("--outlier-rate", o->outlier_rate, "outliers: probability that an element is an outlier")
      ->capture_default_str()
      ->check(real_number(0, 1));
  probe->add_option("--outlier-scale", o->outlier_scale, "outliers: factor an outlier's gaussian value is multiplied by")
      ->capture_default_str()
      ->check(real_number(0, 1e30, /*open_min=*/true));
  probe->add_option("--grid", o->grids, "grids: e2m1, e1m2, or e2m1:2|3|4 for a clipped e2m1 (default: e2m1,e1m2)")
      ->delimiter(',');
  probe->add_option("--scale", o->scales, "scale modes: fp32, e4m3x2, e8m0 (default: all)")->delimiter(',');
  probe->add_option("--rht", o->rhts, "RHT settings: off, on (default: off,on)")->delimiter(',');
  probe->add_option("--method", o->methods,
                    "block methods (docs/recipes.md), each where it is defined: plain, four-over-six, "
                    "double-block, ms-eden, or all (default: plain)")
      ->delimiter(',');
  probe->add_option("--block", o->block, "block size of fp32 and e4m3x2 scales, 16 or 32 (e8m0 always uses 32)")
      ->capture_default_str()
      ->check(whole_number(16, 32));
  auto* rows = probe->add_option("--rows", o->rows, "rows of each synthetic tensor")
                   ->capture_default_str()
                   ->check(whole_number(1, std::numeric_limits<int>::max()));
  auto* cols = probe->add_option("--cols", o->cols, "columns of each synthetic tensor (blocks run along rows)")
                   ->capture_default_str()
                   ->check(whole_number(1, std::numeric_limits<int>::max()));
  auto* seed = probe->add_option("--seed", o->seed, "seed of the synthetic tensors")->capture_default_str()->check(seed_number());
  auto* input = probe->add_option("--input", o->input,
                                  "probe this .npy tensor (1-D or 2-D; float32, float16, or bf16 stored as uint16) "
                                  "instead of synthetic ones");
  input->excludes(dist)->excludes(rows)->excludes(cols)->excludes(seed);
  probe->add_option("--format", o->format, "output: table, csv or json")->capture_default_str();
  probe->add_option("--table", o->table, "which tables: both, sweep (the metrics) or levels (uniform-bins' per-level error)")
      ->capture_default_str();
  probe->callback([o] { run_probe(*o); });
}

}  // namespace fp4::cli
