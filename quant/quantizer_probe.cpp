// quantizer_probe.cpp — see quantizer_probe.h.
#include "quant/quantizer_probe.h"

#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <stdexcept>

#include "base/user_error.h"
#include "quant/npy.h"
#include "engine/recipe.h"
#include "kernels/cpu/quantize.h"

namespace fp4::quant {

// The names of grids, scale modes and RHT sign policies are the recipe's (engine/recipe.h).
using engine::grid_name;
using engine::rht_signs_name;
using engine::scale_mode_name;

namespace {

// ---------------------------------------------------------------------------------------------
// Random numbers
// ---------------------------------------------------------------------------------------------
//
// Element i of a probe tensor draws its words from
//   philox4x32_10(counter = (i, kProbeDomain, stream, k), key = seed),  k = 0, 1, 2, ...
// one call per four words it consumes. The domain word keeps these counters apart from the
// training's element draws (word 1 = index >> 34, small) and its RHT sign draws (0xffffffff);
// `stream` names the distribution ("PRB" + a tag). A rejection sampler may take any number of
// words without shifting any other element's stream, so tensors are reproducible under any
// thread count and any shape that contains the element.
//
// The transforms use only +, −, ×, ÷, sqrt (all correctly rounded) and log/pow. log and pow come
// from the C library and are not guaranteed to be correctly rounded everywhere; the last-bit
// differences they may have are absorbed by the rounding to bf16, except in the rare case where a
// value lies within an ulp of a bf16 rounding boundary.
constexpr uint32_t kProbeDomain = 0xfffffffeu;
constexpr uint32_t kProbeStreamBase = 0x50524200u;  // "PRB\0"
enum StreamTag : uint32_t { kTagGaussian = 1, kTagLaplace = 2, kTagStudentT = 3, kTagOutlierFlag = 4, kTagUniformBins = 5 };

class ElementRandom {
 public:
  ElementRandom(uint64_t seed, uint32_t tag, uint64_t index)
      : seed_(seed), stream_(kProbeStreamBase | tag), index_(static_cast<uint32_t>(index)) {}

  uint32_t word() {
    if (pos_ == 4) {
      block_ = philox4x32_10(index_, kProbeDomain, stream_, next_call_++, static_cast<uint32_t>(seed_),
                             static_cast<uint32_t>(seed_ >> 32));
      pos_ = 0;
    }
    return block_.w[pos_++];
  }

  // Uniform on [0, 1) with 53 random bits.
  double uniform() {
    const uint64_t hi = word() >> 5;  // 27 bits
    const uint64_t lo = word() >> 6;  // 26 bits
    return static_cast<double>((hi << 26) | lo) * 0x1p-53;
  }

  // Uniform on (0, 1): the centre of a 2^-53 cell, so never 0 (log) and never 1 (log(1 − u)).
  double uniform_open() { return uniform() + 0x1p-54; }

  // Standard normal by Marsaglia's polar method: no sin/cos, one log and one sqrt; the second
  // variate of the pair is dropped so that every call starts fresh from the stream.
  double normal() {
    for (;;) {
      const double x = 2.0 * uniform() - 1.0;
      const double y = 2.0 * uniform() - 1.0;
      const double s = x * x + y * y;
      if (s > 0.0 && s < 1.0) return x * std::sqrt(-2.0 * std::log(s) / s);
    }
  }

  // Gamma(shape, 1) by Marsaglia and Tsang (2000); for shape < 1, Gamma(shape + 1) · U^(1/shape).
  double gamma(double shape) {
    if (shape < 1.0) {
      const double g = gamma(shape + 1.0);
      return g * std::pow(uniform_open(), 1.0 / shape);
    }
    const double d = shape - 1.0 / 3.0;
    const double c = 1.0 / std::sqrt(9.0 * d);
    for (;;) {
      double x, v;
      do {
        x = normal();
        v = 1.0 + c * x;
      } while (v <= 0.0);
      v = v * v * v;
      const double u = uniform_open();
      const double x2 = x * x;
      if (u < 1.0 - 0.0331 * x2 * x2) return d * v;  // the cheap squeeze accepts most draws
      if (std::log(u) < 0.5 * x2 + d * (1.0 - v + std::log(v))) return d * v;
    }
  }

 private:
  uint64_t seed_;
  uint32_t stream_;
  uint32_t index_;
  uint32_t next_call_ = 0;
  Philox4 block_{};
  int pos_ = 4;
};

bf16_t to_bf16(double x) { return float_to_bf16(static_cast<float>(x)); }

// Laplace(0, 1) by the inverse of its CDF.
double laplace(ElementRandom& rng) {
  const double u = rng.uniform_open();
  return u < 0.5 ? std::log(2.0 * u) : -std::log(2.0 * (1.0 - u));
}

// Student-t with nu degrees of freedom: Z / sqrt(V / nu), V ~ chi²(nu) = 2 · Gamma(nu / 2).
double student_t(ElementRandom& rng, double nu) {
  const double z = rng.normal();
  const double v = 2.0 * rng.gamma(0.5 * nu);
  return z / std::sqrt(v / nu);
}

// ---------------------------------------------------------------------------------------------
// Names
// ---------------------------------------------------------------------------------------------

std::string lower(std::string_view s) {
  std::string out(s);
  for (char& c : out) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

std::string trim(std::string_view s) {
  size_t b = 0, e = s.size();
  while (b < e && std::isspace(static_cast<unsigned char>(s[b]))) ++b;
  while (e > b && std::isspace(static_cast<unsigned char>(s[e - 1]))) --e;
  return std::string(s.substr(b, e - b));
}

std::string fmt_number(double x) { return fmt::format("{}", x); }

}  // namespace

std::string_view dist_name(Dist d) {
  switch (d) {
    case Dist::gaussian: return "gaussian";
    case Dist::laplace: return "laplace";
    case Dist::student_t: return "student-t";
    case Dist::outliers: return "outliers";
    case Dist::uniform_bins: return "uniform-bins";
  }
  return "?";
}

std::vector<Dist> all_dists() {
  return {Dist::gaussian, Dist::laplace, Dist::student_t, Dist::outliers, Dist::uniform_bins};
}

Dist parse_dist(std::string_view text) {
  const std::string t = lower(trim(text));
  for (Dist d : all_dists())
    if (t == dist_name(d)) return d;
  if (t == "student_t" || t == "t") return Dist::student_t;
  if (t == "uniform_bins") return Dist::uniform_bins;
  throw UserError("--dist: unknown distribution '" + std::string(text) +
                  "': use gaussian, laplace, student-t, outliers or uniform-bins");
}

GridChoice parse_grid(std::string_view text) {
  const std::string t = lower(trim(text));
  const size_t colon = t.find(':');
  const std::string base = t.substr(0, colon);
  const std::string clip = colon == std::string::npos ? "" : t.substr(colon + 1);
  if (base == grid_name(Grid::e2m1)) {
    if (clip.empty() || clip == "6") return {Grid::e2m1, 6.0f, base};
    if (clip == "2" || clip == "3" || clip == "4")
      return {Grid::e2m1, static_cast<float>(clip[0] - '0'), base + ":" + clip};
    throw UserError("--grid " + std::string(text) +
                    ": e2m1 can be clipped at 2, 3, 4 or 6 (e.g. e2m1:4)");
  }
  if (base == grid_name(Grid::e1m2)) {
    if (clip.empty() || clip == "7") return {Grid::e1m2, 7.0f, base};
    throw UserError("--grid " + std::string(text) + ": e1m2 takes no clip (its G_max is 7)");
  }
  throw UserError("--grid: unknown grid '" + std::string(text) +
                  "': use e2m1, e1m2, or e2m1:2, e2m1:3, e2m1:4 for a clipped e2m1");
}

ScaleMode parse_scale(std::string_view text) {
  const std::string t = lower(trim(text));
  for (ScaleMode s : {ScaleMode::fp32, ScaleMode::e4m3x2, ScaleMode::e8m0})
    if (t == scale_mode_name(s)) return s;
  if (t == "nvfp4") return ScaleMode::e4m3x2;  // aliases: the formats these scales come from
  if (t == "mx") return ScaleMode::e8m0;
  throw UserError("--scale: unknown scale mode '" + std::string(text) +
                  "': use fp32, e4m3x2 or e8m0");
}

std::string_view method_name(Method m) {
  switch (m) {
    case Method::plain: return "plain";
    case Method::four_over_six: return "four-over-six";
    case Method::double_block: return "double-block";
    case Method::ms_eden: return "ms-eden";
  }
  return "plain";
}

std::vector<Method> all_methods() {
  return {Method::plain, Method::four_over_six, Method::double_block, Method::ms_eden};
}

std::vector<Method> parse_method(std::string_view text) {
  const std::string t = lower(trim(text));
  if (t == "all") return all_methods();
  for (Method m : all_methods())
    if (t == method_name(m)) return {m};
  throw UserError("--method: unknown method '" + std::string(text) +
                  "': use plain, four-over-six, double-block, ms-eden or all");
}

bool parse_rht(std::string_view text) {
  const std::string t = lower(trim(text));
  if (t == "off" || t == "no" || t == "false") return false;
  if (t == "on" || t == "yes" || t == "true") return true;
  throw UserError("--rht: '" + std::string(text) + "' is not off or on: use --rht off,on (the default), --rht off or --rht on");
}

Format parse_format(std::string_view text) {
  const std::string t = lower(trim(text));
  if (t == "table") return Format::table;
  if (t == "csv") return Format::csv;
  if (t == "json") return Format::json;
  throw UserError("--format: unknown format '" + std::string(text) + "': use table, csv or json");
}

Tables parse_tables(std::string_view text) {
  const std::string t = lower(trim(text));
  if (t == "both") return Tables::both;
  if (t == "sweep") return Tables::sweep;
  if (t == "levels") return Tables::levels;
  throw UserError("--table: unknown table '" + std::string(text) + "': use both, sweep or levels");
}

int block_for(const ProbeConfig& config, ScaleMode scale) {
  // OCP MX fixes 32-element blocks for its power-of-two scales.
  return scale == ScaleMode::e8m0 ? 32 : config.block;
}

namespace {

// The widest block any configuration uses: every blocked length must be a multiple of it.
int widest_block(const ProbeConfig& config) {
  int b = kRhtSize;
  for (ScaleMode s : config.scales) b = std::max(b, block_for(config, s));
  return b;
}

std::string why_block(const ProbeConfig& config, int block) {
  for (ScaleMode s : config.scales)
    if (s == ScaleMode::e8m0 && block == 32 && config.block != 32) return " (e8m0 blocks are 32 wide)";
  return "";
}

// Throws when a tensor of this shape cannot be probed; `where` says where the shape came from.
void check_shape(const ProbeConfig& config, int64_t rows, int64_t cols, const std::string& what_rows,
                 const std::string& what_cols, const std::string& prefix) {
  if (rows <= 0) throw UserError(prefix + what_rows + " must be at least 1");
  if (cols <= 0) throw UserError(prefix + what_cols + " must be at least 1");
  const int b = widest_block(config);
  if (cols % b != 0) {
    const int64_t down = cols / b * b, up = down + b;
    throw UserError(prefix + what_cols + " (" + std::to_string(cols) +
                    ") is not a multiple of the block size " + std::to_string(b) +
                    why_block(config, b) + ": blocks run along it; use a multiple such as " +
                    (down > 0 ? std::to_string(down) + " or " : "") + std::to_string(up));
  }
  if (rows > kMaxProbeElements / cols)
    throw UserError(prefix + "the tensor has " + std::to_string(rows) + "x" + std::to_string(cols) +
                    " elements, more than the probe's limit of 2^28: probe a slice of it");
}

}  // namespace

void validate(const ProbeConfig& c) {
  if (c.input.empty() && c.dists.empty())
    throw UserError("--dist: no distribution selected: name one or more of gaussian, laplace, "
                    "student-t, outliers, uniform-bins");
  if (c.grids.empty()) throw UserError("--grid: no grid selected: use e2m1, e1m2 or both");
  if (c.scales.empty()) throw UserError("--scale: no scale mode selected: use fp32, e4m3x2, e8m0");
  if (c.rht.empty()) throw UserError("--rht: nothing selected: use off, on or off,on");
  if (c.methods.empty()) throw UserError("--method: nothing selected: use plain, four-over-six, double-block, ms-eden or all");
  if (!(c.params.nu >= 0.5 && c.params.nu <= 1e9))
    throw UserError("--nu " + fmt_number(c.params.nu) +
                    ": student-t's degrees of freedom must be between 0.5 and 1e9 (smaller "
                    "values overflow bf16)");
  if (!(c.params.outlier_rate >= 0.0 && c.params.outlier_rate <= 1.0))
    throw UserError("--outlier-rate " + fmt_number(c.params.outlier_rate) +
                    ": a probability must lie in [0, 1] (e.g. 0.001)");
  if (!(c.params.outlier_scale > 0.0 && c.params.outlier_scale <= 1e30))
    throw UserError("--outlier-scale " + fmt_number(c.params.outlier_scale) +
                    ": the outliers' multiplier must be in (0, 1e30] (e.g. 20)");
  if (c.block != 16 && c.block != 32)
    throw UserError("--block " + std::to_string(c.block) +
                    ": fp32 and e4m3x2 blocks are 16 or 32 elements (e8m0 always uses 32)");
  if (c.input.empty()) check_shape(c, c.rows, c.cols, "--rows", "--cols", "");
}

// ---------------------------------------------------------------------------------------------
// Samples
// ---------------------------------------------------------------------------------------------

Sample sample_distribution(Dist dist, const DistParams& params, int rows, int cols, uint64_t seed,
                           const GridChoice& grid) {
  const int64_t n = static_cast<int64_t>(rows) * cols;
  if (rows <= 0 || cols <= 0 || n > kMaxProbeElements)
    throw UserError("probe sample: shape " + std::to_string(rows) + "x" + std::to_string(cols) +
                    " is empty or larger than 2^28 elements");
  if (dist == Dist::uniform_bins && cols % kRhtSize != 0)
    throw UserError("probe sample: uniform-bins needs a multiple of 16 columns");
  Sample s;
  s.values.resize(n);
  if (dist == Dist::uniform_bins) s.level.resize(n);
  const int max_index = grid_max_index(grid.grid, grid.gmax);
  const float gmax = grid_magnitude(grid.grid, max_index);

#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < n; ++i) {
    double x = 0.0;
    switch (dist) {
      case Dist::gaussian: {
        ElementRandom rng(seed, kTagGaussian, i);
        x = rng.normal();
        break;
      }
      case Dist::laplace: {
        ElementRandom rng(seed, kTagLaplace, i);
        x = laplace(rng);
        break;
      }
      case Dist::student_t: {
        ElementRandom rng(seed, kTagStudentT, i);
        x = student_t(rng, params.nu);
        break;
      }
      case Dist::outliers: {
        // The gaussian tensor itself (same stream), with the outliers injected: so the two rows
        // of the probe differ by the outliers alone.
        ElementRandom base(seed, kTagGaussian, i);
        ElementRandom flag(seed, kTagOutlierFlag, i);
        x = base.normal();
        if (flag.uniform() < params.outlier_rate) x *= params.outlier_scale;
        break;
      }
      case Dist::uniform_bins: {
        ElementRandom rng(seed, kTagUniformBins, i);
        const bool negative = (rng.word() & 1u) != 0;
        const int64_t pos = i % kRhtSize;  // == column % 16, since a row holds whole 16-groups
        if (pos == 0) {
          // One ±G_max per 16 elements pins every block's amax, hence s = amax / G_max = 1 in fp32
          // mode (and 1 for e8m0, ≈1 for e4m3x2): the scaled value t is the value itself.
          x = gmax;
          s.level[i] = 0;
        } else {
          const int64_t j = (i / kRhtSize) * (kRhtSize - 1) + (pos - 1);
          const int index = 1 + static_cast<int>(j % max_index);
          const double q = grid_magnitude(grid.grid, index);
          const double q_lo = grid_magnitude(grid.grid, index - 1);
          const double q_hi = index < max_index ? grid_magnitude(grid.grid, index + 1) : q;
          // The bin is [lo, hi], but the draws stay one bf16 ulp (of hi) inside both edges. An edge
          // is a midpoint between two levels, exact in bf16, so a draw rounded onto it would be a
          // tie, which RN sends to the even neighbour, out of the bin: a bias of order ulp/width
          // that a continuous density never has. Trimming both ends by the same amount keeps the
          // mean (lo + hi)/2, so the expected error is still (2q − q₋ − q₊)/4; and lo + ulp, a
          // multiple of ulp above lo, is a bf16 value, so the rounded draws never reach an edge.
          const double lo = 0.5 * (q_lo + q), hi = 0.5 * (q + q_hi);
          const double trim = std::ldexp(1.0, floor_log2(static_cast<float>(hi)) - 7);
          x = (lo + trim) + ((hi - trim) - (lo + trim)) * rng.uniform();
          s.level[i] = static_cast<uint8_t>(index);
        }
        if (negative) x = -x;
        break;
      }
    }
    s.values[i] = to_bf16(x);
  }
  return s;
}

// ---------------------------------------------------------------------------------------------
// Per-level rounding error
// ---------------------------------------------------------------------------------------------

double expected_level_error(const GridChoice& grid, int index) {
  const int max_index = grid_max_index(grid.grid, grid.gmax);
  const double q = grid_magnitude(grid.grid, index);
  const double q_lo = grid_magnitude(grid.grid, index - 1);
  const double q_hi = index < max_index ? grid_magnitude(grid.grid, index + 1) : q;
  // Uniform t on [(q₋+q)/2, (q+q₊)/2] has mean (q₋ + 2q + q₊)/4, and rounds to q.
  return (2.0 * q - q_lo - q_hi) / 4.0;
}

std::vector<LevelRow> level_errors(const Sample& sample, const cpu::QuantizedTensor& q,
                                   const GridChoice& grid) {
  const int max_index = grid_max_index(grid.grid, grid.gmax);
  const int64_t n = static_cast<int64_t>(q.rows) * q.cols;
  if (sample.level.size() != static_cast<size_t>(n) || q.transformed.size() != static_cast<size_t>(n))
    throw std::invalid_argument("level_errors: needs a uniform-bins sample and a tensor quantized with keep_transformed");
  if (q.spec.rht || q.spec.along != BlockAlong::row || q.spec.tile_2d)
    throw std::invalid_argument("level_errors: the per-level table needs row blocks without the RHT");
  std::vector<double> sum(max_index + 1, 0.0);
  std::vector<int64_t> count(max_index + 1, 0);
  const int blocks_per_row = q.cols / q.spec.block;
  for (int64_t i = 0; i < n; ++i) {
    const int level = sample.level[i];
    if (level == 0 || q.codes[i] == kNonFiniteCode) continue;
    const int64_t r = i / q.cols, c = i % q.cols;
    // The block's effective scale: true value = t · scale. Dividing by it measures in grid units
    // even where it is not exactly 1 (e4m3x2's S_dec · s_b).
    const double scale = static_cast<double>(q.scales[r * blocks_per_row + c / q.spec.block]) * q.tensor_scale;
    const double a = std::fabs(static_cast<double>(q.transformed[i]));
    const double a_hat = std::fabs(static_cast<double>(bf16_to_float(q.dequant[i])) * q.tensor_scale);
    sum[level] += (a_hat - a) / scale;
    ++count[level];
  }
  std::vector<LevelRow> out;
  for (int index = 1; index <= max_index; ++index) {
    LevelRow row;
    row.grid = grid.name;
    row.scale = q.spec.scale;
    row.block = q.spec.block;
    row.index = index;
    row.level = grid_magnitude(grid.grid, index);
    const double q_lo = grid_magnitude(grid.grid, index - 1);
    const double q_hi = index < max_index ? grid_magnitude(grid.grid, index + 1) : row.level;
    row.bin_lo = 0.5 * (q_lo + row.level);
    row.bin_hi = 0.5 * (row.level + q_hi);
    row.top = index == max_index;
    row.count = count[index];
    row.mean_error = count[index] > 0 ? sum[index] / static_cast<double>(count[index]) : std::nan("");
    row.expected = expected_level_error(grid, index);
    out.push_back(row);
  }
  return out;
}

// ---------------------------------------------------------------------------------------------
// The sweep
// ---------------------------------------------------------------------------------------------

namespace {

// Turns a plain spec into the method's; false where the method is not defined for it (the row is
// left out). MS-EDEN replaces the 16-wide RHT with its own 128-wide one, drawn from the seed as a
// training run's first call (layer 0, dgrad, micro-step 0, step 0), so it runs only as "rht on".
bool method_spec(Method method, int cols, uint64_t seed, QuantSpec& spec) {
  const bool full_e2m1 = spec.grid == Grid::e2m1 && spec.gmax == 6.0f;
  const bool nvfp4_blocks = full_e2m1 && spec.scale == ScaleMode::e4m3x2 && spec.block == 16 && cols % 128 == 0;
  switch (method) {
    case Method::plain: return true;
    case Method::four_over_six:
      spec.four_over_six = true;
      return full_e2m1 && spec.scale != ScaleMode::e8m0;
    case Method::double_block:
      spec.outer_block = kOuterBlock;
      return nvfp4_blocks;
    case Method::ms_eden: {
      if (!nvfp4_blocks || !spec.rht) return false;
      spec.ms_eden = true;
      spec.rht_size = kRhtWideSize;
      const Philox4 call = rht_call_signs(seed, 0, Gemm::dgrad, 0, 0);
      for (int i = 0; i < 4; ++i) spec.rht_wide_signs[i] = call.w[i];
      spec.seed = seed;
      return true;
    }
  }
  return false;
}

}  // namespace

ProbeResult run_probe(const ProbeConfig& config, const ProgressFn& progress) {
  validate(config);
  ProbeResult r;
  r.seed = config.seed;
  r.params = config.params;
  r.block = config.block;

  // Deduplicate the axes, keeping the user's order.
  std::vector<Dist> dists;
  for (Dist d : config.dists)
    if (std::find(dists.begin(), dists.end(), d) == dists.end()) dists.push_back(d);
  std::vector<GridChoice> grids;
  for (const GridChoice& g : config.grids)
    if (std::none_of(grids.begin(), grids.end(), [&](const GridChoice& h) { return h.name == g.name; }))
      grids.push_back(g);
  std::vector<ScaleMode> scales;
  for (ScaleMode s : config.scales)
    if (std::find(scales.begin(), scales.end(), s) == scales.end()) scales.push_back(s);
  std::vector<bool> rhts;
  for (bool b : config.rht)
    if (std::find(rhts.begin(), rhts.end(), b) == rhts.end()) rhts.push_back(b);

  // The tensors to probe: the input file, or one per distribution (uniform-bins: per grid, below).
  Sample input_sample;
  std::string input_label;
  if (!config.input.empty()) {
    const npy::Array a = npy::read(config.input);
    check_shape(config, a.rows(), a.cols(), "its first axis", "its last axis", config.input + ": ");
    r.rows = static_cast<int>(a.rows());
    r.cols = static_cast<int>(a.cols());
    r.input = config.input;
    r.input_dtype = std::string(npy::dtype_name(a.dtype));
    input_sample.values = npy::to_bf16(a);
    input_label = std::filesystem::path(config.input).filename().string();
    dists.clear();
  } else {
    r.rows = config.rows;
    r.cols = config.cols;
    r.dists = dists;
  }

  const int per_tensor = static_cast<int>(grids.size() * scales.size() * rhts.size());
  const int total = per_tensor * static_cast<int>(config.input.empty() ? dists.size() : 1);
  int done = 0;
  int64_t worst_nonfinite = 0;

  std::vector<Method> methods;
  for (Method m : config.methods)
    if (std::find(methods.begin(), methods.end(), m) == methods.end()) methods.push_back(m);

  auto sweep_one = [&](const std::string& label, const Sample& sample, const GridChoice& grid, bool levels) {
    for (ScaleMode scale : scales)
      for (bool rht : rhts) {
        if (progress)
          progress(done, total, fmt::format("{} {} {} rht {}", label, grid.name, scale_mode_name(scale), rht ? "on" : "off"));
        for (Method method : methods) {
          QuantSpec spec;
          spec.grid = grid.grid;
          spec.gmax = grid.gmax;
          spec.scale = scale;
          spec.block = block_for(config, scale);
          spec.along = BlockAlong::row;
          spec.rht = rht;
          spec.rht_signs = kRhtFixedSigns;
          spec.rounding = Rounding::rn;
          if (!method_spec(method, r.cols, config.seed, spec)) continue;
          const cpu::QuantizedTensor q = cpu::quantize(sample.values.data(), r.rows, r.cols, spec, true);
          ProbeRow row;
          row.dist = label;
          row.grid = grid.name;
          row.scale = scale;
          row.block = spec.block;
          row.rht = rht;
          row.method = method;
          row.metrics = cpu::quant_metrics(q);
          worst_nonfinite = std::max(worst_nonfinite, row.metrics.nonfinite);
          r.results.push_back(row);
          if (levels && !rht && method == Method::plain) {
            std::vector<LevelRow> lv = level_errors(sample, q, grid);
            r.levels.insert(r.levels.end(), lv.begin(), lv.end());
          }
        }
        ++done;
      }
  };

  if (!config.input.empty()) {
    for (const GridChoice& g : grids) sweep_one(input_label, input_sample, g, false);
  } else {
    for (Dist d : dists) {
      if (d == Dist::uniform_bins) {
        for (const GridChoice& g : grids)
          sweep_one(std::string(dist_name(d)), sample_distribution(d, config.params, r.rows, r.cols, config.seed, g), g, true);
        if (std::find(rhts.begin(), rhts.end(), false) == rhts.end())
          r.notes.push_back("the per-level table of uniform-bins needs --rht off; it was not measured");
      } else {
        const Sample s = sample_distribution(d, config.params, r.rows, r.cols, config.seed);
        for (const GridChoice& g : grids) sweep_one(std::string(dist_name(d)), s, g, false);
      }
    }
  }
  if (progress) progress(done, total, "");
  if (worst_nonfinite > 0)
    r.notes.push_back(fmt::format("{} elements lie in blocks holding a NaN or an infinity: they were left out of the metrics",
                                  worst_nonfinite));
  return r;
}

// ---------------------------------------------------------------------------------------------
// Output
// ---------------------------------------------------------------------------------------------

std::string header_line(const ProbeResult& r) {
  std::string what;
  if (!r.input.empty())
    what = fmt::format("{} ({} {}x{}, as bf16)", r.input, r.input_dtype, r.rows, r.cols);
  else
    what = fmt::format("{}x{} bf16 samples per distribution, seed {}", r.rows, r.cols, r.seed);
  std::string params;
  if (r.input.empty()) {
    for (Dist d : r.dists) {
      if (d == Dist::student_t) params += fmt::format("; student-t nu={}", r.params.nu);
      if (d == Dist::outliers)
        params += fmt::format("; outliers: rate {} x{}", r.params.outlier_rate, r.params.outlier_scale);
    }
  }
  return fmt::format("# fp4lab quant probe: {}; blocks along rows ({}, e8m0 32); RHT = FWHT16/4, fixed signs, "
                     "along rows{}; metrics of NUMERICS.md section 8",
                     what, r.block, params);
}

namespace {

std::string on_off(bool b) { return b ? "on" : "off"; }

bool shows_methods(const ProbeResult& r) {
  return std::any_of(r.results.begin(), r.results.end(), [](const ProbeRow& row) { return row.method != Method::plain; });
}

std::string csv_field(const std::string& s) {
  if (s.find_first_of(",\"\n\r") == std::string::npos) return s;
  std::string out = "\"";
  for (char c : s) {
    if (c == '"') out += '"';
    out += c;
  }
  return out + "\"";
}

const char* kLevelsTitle =
    "# per-level rounding error (uniform-bins, RHT off): mean of |q_hat| - |t| in grid units over values "
    "uniform in each level's RN bin; expected = (2q - q_lo - q_hi)/4 (at the top, q_hi = q)";

}  // namespace

std::string format_table(const ProbeResult& r, Tables tables) {
  std::string out = header_line(r) + "\n";
  if (tables != Tables::levels) {
    size_t dw = 4;
    for (const ProbeRow& row : r.results) dw = std::max(dw, row.dist.size());
    size_t gw = 4;
    for (const ProbeRow& row : r.results) gw = std::max(gw, row.grid.size());
    // The method column appears only when --method asked for more than plain (the default output
    // is what it always was).
    const bool methods = shows_methods(r);
    out += fmt::format("{:<{}}  {:<{}}  {:<6}  {:>5}  {:<3}  {}{:>9}  {:>10}  {:>10}  {:>8}  {:>6}\n", "dist", dw, "grid",
                       gw, "scale", "block", "rht", methods ? fmt::format("{:<13}  ", "method") : "", "alpha", "shrink",
                       "nmse", "sqnr_db", "b_eff");
    std::string last_dist;
    for (const ProbeRow& row : r.results) {
      if (!last_dist.empty() && row.dist != last_dist) out += "\n";
      last_dist = row.dist;
      const cpu::QuantMetrics& m = row.metrics;
      out += fmt::format("{:<{}}  {:<{}}  {:<6}  {:>5}  {:<3}  {}{:>9.6f}  {:>+10.6f}  {:>10.4e}  {:>8.3f}  {:>6.4f}\n",
                         row.dist, dw, row.grid, gw, scale_mode_name(row.scale), row.block, on_off(row.rht),
                         methods ? fmt::format("{:<13}  ", method_name(row.method)) : "", m.alpha, m.shrink, m.nmse,
                         m.sqnr_db, m.b_eff);
    }
  }
  if (tables != Tables::sweep && !r.levels.empty()) {
    if (tables == Tables::both) out += "\n";
    out += std::string(kLevelsTitle) + "\n";
    out += fmt::format("{:<6}  {:<6}  {:>5}  {:>5}  {:<14}  {:>9}  {:>10}  {:>9}\n", "grid", "scale", "block", "level",
                       "bin", "count", "mean_error", "expected");
    std::string last;
    for (const LevelRow& l : r.levels) {
      const std::string key = l.grid + std::string(scale_mode_name(l.scale));
      if (!last.empty() && key != last) out += "\n";
      last = key;
      const std::string bin = fmt::format("[{}, {}]{}", l.bin_lo, l.bin_hi, l.top ? " top" : "");
      out += fmt::format("{:<6}  {:<6}  {:>5}  {:>5}  {:<14}  {:>9}  {:>+10.4f}  {:>+9.4f}\n", l.grid,
                         scale_mode_name(l.scale), l.block, l.level, bin, l.count, l.mean_error, l.expected);
    }
  }
  for (const std::string& note : r.notes) out += "# note: " + note + "\n";
  return out;
}

std::string format_csv(const ProbeResult& r, Tables tables) {
  std::string out;
  if (tables != Tables::levels) {
    const bool methods = shows_methods(r);
    out += std::string("dist,grid,scale,block,rht,alpha,shrink,nmse,sqnr_db,b_eff,count,nonfinite") +
           (methods ? ",method\n" : "\n");
    for (const ProbeRow& row : r.results) {
      const cpu::QuantMetrics& m = row.metrics;
      out += fmt::format("{},{},{},{},{},{},{},{},{},{},{},{}", csv_field(row.dist), csv_field(row.grid),
                         scale_mode_name(row.scale), row.block, on_off(row.rht), fmt_number(m.alpha),
                         fmt_number(m.shrink), fmt_number(m.nmse), fmt_number(m.sqnr_db), fmt_number(m.b_eff),
                         m.count, m.nonfinite);
      out += methods ? "," + std::string(method_name(row.method)) + "\n" : "\n";
    }
  }
  if (tables != Tables::sweep && !r.levels.empty()) {
    if (tables == Tables::both) out += "\n";
    out += "grid,scale,block,level,bin_lo,bin_hi,top,count,mean_error,expected\n";
    for (const LevelRow& l : r.levels)
      out += fmt::format("{},{},{},{},{},{},{},{},{},{}\n", csv_field(l.grid), scale_mode_name(l.scale), l.block,
                         fmt_number(l.level), fmt_number(l.bin_lo), fmt_number(l.bin_hi), l.top ? 1 : 0, l.count,
                         fmt_number(l.mean_error), fmt_number(l.expected));
  }
  return out;
}

std::string format_json(const ProbeResult& r, Tables tables) {
  using json = nlohmann::ordered_json;
  // nlohmann writes NaN and infinities as null, which is what we want: JSON has no spelling for them.
  json probe;
  probe["command"] = "fp4lab quant probe";
  probe["header"] = header_line(r);
  probe["shape"] = {r.rows, r.cols};
  probe["seed"] = r.seed;
  if (!r.input.empty()) {
    probe["input"] = r.input;
    probe["input_dtype"] = r.input_dtype;
  } else {
    json dists = json::array();
    for (Dist d : r.dists) dists.push_back(std::string(dist_name(d)));
    probe["distributions"] = dists;
    probe["nu"] = r.params.nu;
    probe["outlier_rate"] = r.params.outlier_rate;
    probe["outlier_scale"] = r.params.outlier_scale;
  }
  probe["block"] = r.block;
  probe["e8m0_block"] = 32;
  probe["blocks_along"] = "rows";
  probe["rht_signs"] = rht_signs_name(RhtSigns::fixed);  // run_probe quantizes with kRhtFixedSigns
  probe["rounding"] = "rn";

  json doc;
  doc["probe"] = probe;
  if (tables != Tables::levels) {
    json rows = json::array();
    for (const ProbeRow& row : r.results) {
      const cpu::QuantMetrics& m = row.metrics;
      rows.push_back({{"dist", row.dist},
                      {"grid", row.grid},
                      {"scale", std::string(scale_mode_name(row.scale))},
                      {"block", row.block},
                      {"rht", row.rht},
                      {"alpha", m.alpha},
                      {"shrink", m.shrink},
                      {"nmse", m.nmse},
                      {"sqnr_db", m.sqnr_db},
                      {"b_eff", m.b_eff},
                      {"count", m.count},
                      {"nonfinite", m.nonfinite}});
      if (shows_methods(r)) rows.back()["method"] = std::string(method_name(row.method));
    }
    doc["results"] = rows;
  }
  if (tables != Tables::sweep) {
    json levels = json::array();
    for (const LevelRow& l : r.levels)
      levels.push_back({{"grid", l.grid},
                        {"scale", std::string(scale_mode_name(l.scale))},
                        {"block", l.block},
                        {"level", l.level},
                        {"bin", {l.bin_lo, l.bin_hi}},
                        {"top", l.top},
                        {"count", l.count},
                        {"mean_error", l.mean_error},
                        {"expected", l.expected}});
    doc["levels"] = levels;
  }
  doc["notes"] = r.notes;
  return doc.dump(2) + "\n";
}

std::string format(const ProbeResult& r, Format f, Tables tables) {
  switch (f) {
    case Format::table: return format_table(r, tables);
    case Format::csv: return format_csv(r, tables);
    case Format::json: return format_json(r, tables);
  }
  return {};
}

}  // namespace fp4::quant
