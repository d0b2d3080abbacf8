// quantizer_probe.h — `fp4lab quant probe`: what the 4-bit quantizer does to a tensor.
//
// For every distribution × grid × scale mode × RHT on/off the probe quantizes one bf16 tensor
// with the CPU reference quantizer (kernels/cpu/quantize) and measures NUMERICS.md §8's alpha,
// shrink, nmse, sqnr_db and b_eff (kernels/cpu/quant_metrics). The `uniform-bins` distribution
// also yields the per-level table: the mean rounding error inside each grid level's bin, against
// the analytic value (2q − q₋ − q₊)/4 of a locally flat density.
//
// Samples are deterministic and the same on every platform: element i of a distribution depends
// only on (seed, distribution, i) (uniform-bins: also on the grid and i's place in its block),
// because every element draws from its own Philox4x32-10 counter stream (layout in
// quant_probe.cpp), and the transforms to normal, Laplace, Student-t and Gamma variates are
// written here rather than taken from <random>, whose distributions are implementation-defined.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include "kernels/cpu/quant_metrics.h"
#include "kernels/numerics.h"

namespace fp4::quant {

enum class Dist : uint8_t { gaussian = 0, laplace = 1, student_t = 2, outliers = 3, uniform_bins = 4 };

std::string_view dist_name(Dist d);         // the --dist spelling: "student-t", "uniform-bins", ...
std::vector<Dist> all_dists();

// An element grid, possibly restricted by a clip (NUMERICS.md §2).
struct GridChoice {
  Grid grid = Grid::e2m1;
  float gmax = 6.0f;
  std::string name = "e2m1";  // "e2m1", "e1m2", or "e2m1:4" for e2m1 clipped at 4
};

// Parsers for the CLI's option values. Each throws UserError with one line that names
// the option, the bad value and the accepted ones.
Dist parse_dist(std::string_view text);
GridChoice parse_grid(std::string_view text);
ScaleMode parse_scale(std::string_view text);
bool parse_rht(std::string_view text);  // "off" / "on"

// How a block's scale and codes are found (docs/recipes.md): §3's plain scales, Four Over Six, the
// double-block scales of TetraJet-v2, or Quartet II's MS-EDEN (with its own 128-wide RHT).
enum class Method : uint8_t { plain = 0, four_over_six = 1, double_block = 2, ms_eden = 3 };
std::string_view method_name(Method m);       // "plain", "four-over-six", "double-block", "ms-eden"
std::vector<Method> all_methods();
// One method, or "all" (the CLI expands it). Throws UserError naming the accepted values.
std::vector<Method> parse_method(std::string_view text);

// Parameters of the synthetic distributions. gaussian is N(0, 1); laplace has scale b = 1
// (density e^{-|x|}/2); student-t is the standard t with nu degrees of freedom; outliers is the
// gaussian sample with each element, with probability outlier_rate, multiplied by outlier_scale.
struct DistParams {
  double nu = 3.0;
  double outlier_rate = 1e-3;
  double outlier_scale = 20.0;
};

struct ProbeConfig {
  std::vector<Dist> dists = all_dists();
  DistParams params;
  std::vector<GridChoice> grids = {GridChoice{Grid::e2m1, 6.0f, "e2m1"}, GridChoice{Grid::e1m2, 7.0f, "e1m2"}};
  std::vector<ScaleMode> scales = {ScaleMode::fp32, ScaleMode::e4m3x2, ScaleMode::e8m0};
  std::vector<bool> rht = {false, true};
  // Each method runs only where it is defined: four-over-six on e2m1 (clip 6) with fp32 or e4m3x2;
  // double-block on e2m1 with e4m3x2 blocks of 16 and --cols a multiple of 128; ms-eden likewise,
  // as its own "rht on" row (its 128-wide RHT with signs drawn from --seed).
  std::vector<Method> methods = {Method::plain};
  int block = 16;        // fp32 and e4m3x2 blocks; e8m0 always uses OCP MX's 32
  int rows = 1024;       // synthetic tensor shape; blocks run along rows (the last axis)
  int cols = 4096;
  uint64_t seed = 0;
  std::string input;     // a .npy file: when set, its tensor replaces the synthetic distributions
};

// Largest tensor the probe takes (elements): a few bytes per element per copy stay in memory.
constexpr int64_t kMaxProbeElements = int64_t{1} << 28;

// The block size a scale mode uses under this config.
int block_for(const ProbeConfig& config, ScaleMode scale);

// Throws UserError (one line: which option, what is wrong, what to do) when the
// config cannot run. run_probe() calls it; the CLI may call it early.
void validate(const ProbeConfig& config);

// ---------------------------------------------------------------------------------------------
// Samples
// ---------------------------------------------------------------------------------------------

struct Sample {
  std::vector<bf16_t> values;  // [rows, cols] row-major, the quantizer's input
  // uniform-bins only: per element, the magnitude index of the level whose bin it was drawn in,
  // or 0 for the elements pinned at ±G_max that fix every block's scale.
  std::vector<uint8_t> level;
};

// Draws a synthetic tensor. `grid` matters only for uniform-bins: every 16 consecutive elements
// of a row hold one ±G_max (so an fp32 block scale is exactly 1, and t = value) and 15 values
// uniform inside the RN bins of the levels 1..max, cycled so each level gets the same count.
Sample sample_distribution(Dist dist, const DistParams& params, int rows, int cols, uint64_t seed,
                           const GridChoice& grid = {});

// ---------------------------------------------------------------------------------------------
// Results
// ---------------------------------------------------------------------------------------------

struct ProbeRow {
  std::string dist;     // distribution name, or the input file's name
  std::string grid;     // GridChoice::name
  ScaleMode scale = ScaleMode::fp32;
  int block = 16;
  bool rht = false;
  Method method = Method::plain;
  cpu::QuantMetrics metrics;
};

// One grid level of the uniform-bins experiment (RHT off): the rounding error q̂ − t measured in
// magnitude (|q̂| − |t|, so negative means toward zero), in grid units (divided by the block's
// effective scale).
struct LevelRow {
  std::string grid;
  ScaleMode scale = ScaleMode::fp32;
  int block = 16;
  int index = 0;           // magnitude index of the level
  double level = 0.0;      // q
  double bin_lo = 0.0;     // the RN bin [bin_lo, bin_hi] the values were drawn in
  double bin_hi = 0.0;
  bool top = false;        // q = G_max: its bin is only the lower half, nothing lies above G_max
  int64_t count = 0;
  double mean_error = 0.0;
  double expected = 0.0;   // (2q − q₋ − q₊)/4, with q₊ = q at the top
};

// The analytic mean rounding error of a locally flat density inside level `index`'s bin.
double expected_level_error(const GridChoice& grid, int index);

// The per-level table of one quantized uniform-bins tensor (quantized with keep_transformed).
std::vector<LevelRow> level_errors(const Sample& sample, const cpu::QuantizedTensor& q,
                                   const GridChoice& grid);

struct ProbeResult {
  int rows = 0, cols = 0;
  uint64_t seed = 0;
  DistParams params;
  int block = 16;
  std::vector<Dist> dists;       // synthetic distributions run (empty with an input file)
  std::string input;             // the input file, if any
  std::string input_dtype;       // its dtype as stored
  std::vector<ProbeRow> results;
  std::vector<LevelRow> levels;
  std::vector<std::string> notes;  // anything the reader must know (non-finite inputs, ...)
};

// Progress: configurations done, total, and what runs next.
using ProgressFn = std::function<void(int done, int total, const std::string& what)>;

ProbeResult run_probe(const ProbeConfig& config, const ProgressFn& progress = {});

// ---------------------------------------------------------------------------------------------
// Output
// ---------------------------------------------------------------------------------------------

enum class Format : uint8_t { table = 0, csv = 1, json = 2 };
enum class Tables : uint8_t { both = 0, sweep = 1, levels = 2 };
Format parse_format(std::string_view text);
Tables parse_tables(std::string_view text);

// The one-line description of what was measured (shape, seed, source, blocks, RHT).
std::string header_line(const ProbeResult& r);

// Aligned text: the header line, the sweep table, then the per-level table.
std::string format_table(const ProbeResult& r, Tables tables = Tables::both);
// CSV: a header row and one row per result. With Tables::both and a per-level table, the level
// table follows the sweep table after one empty line, with its own header row.
std::string format_csv(const ProbeResult& r, Tables tables = Tables::both);
// One JSON object: {"probe": {...what was measured...}, "results": [...], "levels": [...],
// "notes": [...]}; NaN and infinities are written as null.
std::string format_json(const ProbeResult& r, Tables tables = Tables::both);
std::string format(const ProbeResult& r, Format format, Tables tables = Tables::both);

}  // namespace fp4::quant
