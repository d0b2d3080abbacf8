// [gpu] The branch-free element rounding of the fused kernels (kernels/cuda/quantize/quantize_element.cuh)
// against numerics.h on the device: every non-negative float for the two rounding steps, every
// float for the bf16 conversion, every pair of significands for the fast fp32 division (2^46
// quotients, about a minute), billions of random operands for the division's whole range and for
// whole elements, and the block amax / finiteness reduction (quantize_kernels.cuh) against its
// integer definition on every float in every position, NaNs included.
#include <catch2/catch.hpp>

#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

#include "kernels/cuda/cuda_common.cuh"
#include "kernels/cuda/quantize/quantize.cuh"
#include "kernels/cuda/quantize/quantize_element.cuh"
#include "kernels/cuda/quantize/quantize_kernels.cuh"
#include "kernels/numerics.h"
#include "tests/gpu/device_report.cuh"

namespace {

using namespace fp4;
using namespace fp4::cuda::detail;
using fp4::cuda::DeviceArray;

using fp4::test::DeviceReport;
using fp4::test::Report;
using fp4::test::describe;
using fp4::test::report;

// Random words for sample k of a test (Philox, so every run checks the same samples).
__device__ Philox4 sample_words(uint64_t k, uint32_t test) { return philox4x32_10(static_cast<uint32_t>(k), static_cast<uint32_t>(k >> 32), test, 0, 0x1234u, 0x5678u); }

// A float with the given exponent range [lo, hi] (unbiased) and random mantissa and sign.
__device__ float random_float(uint32_t w_exp, uint32_t w_mant, int lo, int hi, bool random_sign) {
  const int e = lo + static_cast<int>(w_exp % static_cast<uint32_t>(hi - lo + 1));
  const uint32_t sign = random_sign ? (w_exp & 0x80000000u) : 0u;
  return bits_float(sign | (static_cast<uint32_t>(e + 127) << 23) | (w_mant & 0x7fffffu));
}

// Every non-negative, non-NaN float x (+Inf included), each grid's every clip: the RN magnitude by
// float arithmetic is the magnitude of numerics.h's RN index, bit for bit, and its index is that
// index.
template <Grid G>
__global__ void check_nearest(int min_index, Report* r) {
  for (uint64_t k = blockIdx.x * static_cast<uint64_t>(blockDim.x) + threadIdx.x; k <= 0x7f800000ull;
       k += static_cast<uint64_t>(gridDim.x) * blockDim.x) {
    const float x = bits_float(static_cast<uint32_t>(k));
    for (int mi = min_index; mi <= 7; ++mi) {
      const int want = round_nearest_index(G, x, mi);
      const float got = nearest_magnitude<G>(x, grid_magnitude(G, mi));
      if (float_bits(got) != float_bits(grid_magnitude(G, want)) || magnitude_index<G>(got) != want)
        report(r, k, static_cast<uint64_t>(mi));
    }
  }
}

// Every non-negative, non-NaN float x, each clip, one random u per x, u = 0 and the largest u: the
// SR magnitude (given u24 = u * 2^24, as the kernels pass it) and its index.
template <Grid G>
__global__ void check_stochastic(int min_index, Report* r) {
  for (uint64_t k = blockIdx.x * static_cast<uint64_t>(blockDim.x) + threadIdx.x; k <= 0x7f800000ull;
       k += static_cast<uint64_t>(gridDim.x) * blockDim.x) {
    const float x = bits_float(static_cast<uint32_t>(k));
    const float u_rand = uniform_from_word(sample_words(k, 1).w[0]);
    for (int mi = min_index; mi <= 7; ++mi) {
      const float gmax = grid_magnitude(G, mi);
      const float us[3] = {u_rand, 0.0f, uniform_from_word(0xffffffffu)};
      for (float u : us) {
        const int want = round_stochastic_index(G, x, mi, u);
        const float got = stochastic_magnitude<G>(x, gmax, u * 16777216.0f);
        if (float_bits(got) != float_bits(grid_magnitude(G, want)) || magnitude_index<G>(got) != want)
          report(r, k, static_cast<uint64_t>(mi));
      }
    }
  }
}

// The hardware's bf16 conversion against float_to_bf16 on every float that is not a NaN.
__global__ void check_bf16(Report* r) {
  for (uint64_t k = blockIdx.x * static_cast<uint64_t>(blockDim.x) + threadIdx.x; k <= 0xffffffffull;
       k += static_cast<uint64_t>(gridDim.x) * blockDim.x) {
    const float x = bits_float(static_cast<uint32_t>(k));
    if (x != x) continue;
    if (hw_float_to_bf16(x) != float_to_bf16(x)) report(r, k, hw_float_to_bf16(x));
    // The packed conversion, x in each half (paired with a neighbour pattern in the other).
    const float y = bits_float(static_cast<uint32_t>(k) ^ 0x00400001u);
    if (y != y) continue;
    const uint32_t p = hw_pack_bf16x2(x, y), q = hw_pack_bf16x2(y, x);
    if ((p & 0xffffu) != float_to_bf16(x) || (p >> 16) != float_to_bf16(y) || (q >> 16) != float_to_bf16(x))
      report(r, k, p);
  }
}

// The fast fp32 division on every pair of significands: v, s in [1, 2), block x = s's significand,
// the threads of a block take every v. The three operations of fast_quotient must give the IEEE
// quotient (every other pair of the fast range is one of these scaled by powers of two, see
// quantize_element.cuh).
__global__ void check_division_pairs(Report* r) {
  const float s = bits_float(0x3f800000u | blockIdx.x);
  const FastDivisor d = make_fast_divisor(s);
  unsigned long long bad = 0;
  uint32_t first = 0;
  for (uint32_t m = threadIdx.x; m < (1u << 23); m += blockDim.x) {
    const float v = bits_float(0x3f800000u | m);
    if (float_bits(fast_quotient(v, d)) != float_bits(__fdiv_rn(v, s))) {
      if (bad == 0) first = m;
      ++bad;
    }
  }
  if (bad != 0) {
    atomicAdd(&r->mismatches, bad - 1);
    report(r, float_bits(bits_float(0x3f800000u | first)), float_bits(s));
  }
}

// The fast fp32 division over its whole range: random divisors in its range and quotients in
// [2^-30, 8) must give exactly |v / s| (and v / s signed); tiny quotients must stay below 2^-28 in
// magnitude (all that round to nearest and stochastic rounding with u >= 2^-24 need of them). The dividends: the product of a random
// quotient and s, one ulp either side of it, or (the hard cases for a correctly rounded quotient)
// within two ulps of the midpoint between the quotient and its successor times s.
__global__ void check_division(uint64_t samples, Report* r) {
  for (uint64_t k = blockIdx.x * static_cast<uint64_t>(blockDim.x) + threadIdx.x; k < samples;
       k += static_cast<uint64_t>(gridDim.x) * blockDim.x) {
    const Philox4 w = sample_words(k, 2);
    const float s = random_float(w.w[0], w.w[1], -60, 59, false);
    const FastDivisor d = make_fast_divisor(s);
    // Quotient exponent: mostly the normal range [-30, 2], one sample in 8 tiny ([-160, -31]:
    // a normal float of [-126, -31], half of them scaled by 2^-34 into the subnormals).
    const bool tiny = (w.w[2] & 7u) == 0;
    float qt = tiny ? random_float(w.w[2] >> 3, w.w[3], -126, -31, true)
                    : random_float(w.w[2] >> 3, w.w[3], -30, 2, true);
    if (tiny && (w.w[1] >> 31) != 0) qt = qt * 5.82076609e-11f;  // 2^-34
    // v near qt * s; every fourth sample exactly a representable quotient times s, when exact.
    float v = __fmul_rn(qt, s);
    if ((w.w[3] & 3u) == 1u) v = bits_float(float_bits(v) + 1u);
    if ((w.w[3] & 3u) == 2u) v = bits_float(float_bits(v) - 1u);
    if ((w.w[3] & 3u) == 3u) {  // the midpoint between qt and its successor, times s, +-2 ulps
      const double mid = (static_cast<double>(qt) + static_cast<double>(bits_float(float_bits(qt) + 1u))) * 0.5;
      v = __double2float_rn(mid * static_cast<double>(s));
      v = bits_float(float_bits(v) + static_cast<uint32_t>((w.w[3] >> 2) % 5u) - 2u);
    }
    if (!is_finite(v) || v == 0.0f) continue;
    const float want = abs_f(v / s);
    if (!(want < 16.0f)) continue;  // outside the fast path's domain (|v / s| <= G_max (1 + 2^-23) there)
    const float got = fast_quotient_abs(v, d);
    if (abs_f(v) >= s * 9.31322575e-10f /* 2^-30, exact scaling */) {
      if (float_bits(got) != float_bits(want) || float_bits(fast_quotient(v, d)) != float_bits(v / s))
        report(r, float_bits(v), float_bits(s));
    } else if (!(got < 3.7252903e-9f /* 2^-28 */)) {
      report(r, float_bits(v), float_bits(s));
    }
  }
}

// The block amax / finiteness reduction (absmax_bits, quantize_kernels.cuh) against its
// definition, the unsigned maximum of the magnitude bits: the same finiteness (maximum below
// 0x7f800000) and, for finite vectors, the same bits. Every 32-bit pattern x (NaNs, infinities,
// both signs, subnormals) in each of the 4 positions of a vector whose other values are random
// floats (mostly finite; one in 16 of any pattern) or patterns next to x's magnitude.
__global__ void check_absmax(Report* r) {
  for (uint64_t k = blockIdx.x * static_cast<uint64_t>(blockDim.x) + threadIdx.x; k <= 0xffffffffull;
       k += static_cast<uint64_t>(gridDim.x) * blockDim.x) {
    const Philox4 w = sample_words(k, 5);
    float v[4];
    for (int j = 0; j < 4; ++j) {
      uint32_t b = w.w[j];
      if ((b & 0xf0u) != 0) b &= 0xff7fffffu;  // mostly finite: clear one exponent bit
      if ((b & 0x300u) == 0) b = (static_cast<uint32_t>(k) ^ (b & 0x80000000u)) + ((b >> 10) & 3u) - 1u;
      v[j] = bits_float(b);
    }
    for (int pos = 0; pos < 4; ++pos) {
      float u[4] = {v[0], v[1], v[2], v[3]};
      u[pos] = bits_float(static_cast<uint32_t>(k));
      uint32_t want = 0;
      for (int j = 0; j < 4; ++j) want = max(want, float_bits(u[j]) & 0x7fffffffu);
      const uint32_t got = absmax_bits<4>(u);
      const bool want_finite = want < kF32InfBits, got_finite = got < kF32InfBits;
      if (want_finite != got_finite || (want_finite && got != want)) report(r, k, pos);
    }
  }
}

// Whole elements: BlockQuantizer against quantize_element on random blocks and values.
template <Grid G, Rounding R, ScaleMode M>
__global__ void check_elements(uint64_t samples, Report* r) {
  for (uint64_t k = blockIdx.x * static_cast<uint64_t>(blockDim.x) + threadIdx.x; k < samples;
       k += static_cast<uint64_t>(gridDim.x) * blockDim.x) {
    const Philox4 w = sample_words(k, 3);
    const Philox4 w2 = sample_words(k, 4);
    const int max_index = G == Grid::e2m1 ? 4 + static_cast<int>(w2.w[0] % 4u) : 1 + static_cast<int>(w2.w[0] % 7u);
    const float gmax = grid_magnitude(G, max_index);
    // Block amax over a wide range (the fp32 fast range and beyond), tensor amax above it.
    const float amax_b = random_float(w.w[0], w.w[1], -70, 70, false);
    const float amax_t = amax_b * (1.0f + static_cast<float>(w2.w[1] >> 8) * (1.0f / 16777216.0f) * 1000.0f);
    const TensorScale ts = make_tensor_scale(amax_t, gmax);
    const BlockScale bs = make_block_scale(M, amax_b, gmax, ts);
    if (bs.zero_block) continue;
    // A value of the block: |v| <= amax_b, of any smaller magnitude too; sometimes amax itself.
    const float frac = static_cast<float>(w.w[2] >> 8) * (1.0f / 16777216.0f);
    float v = amax_b * frac;
    const int shift = static_cast<int>(w2.w[2] % 48u);
    if (shift > 24) v = v * exp2_int(-(shift - 24) * 3);
    if ((w2.w[2] & 0x300u) == 0) v = amax_b;
    if (w.w[2] & 1u) v = -v;
    const float u = (w2.w[3] & 0xf0u) == 0 ? 0.0f : uniform_from_word(w.w[3]);
    const BlockQuantizer<G, R, M> q(bs, max_index);
    if (!q.fast()) continue;
    const QuantizedElement got = q(v, u);
    const QuantizedElement want = quantize_element(v, bs, G, max_index, R, u);
    if (got.out != want.out || got.code != want.code) report(r, float_bits(v), float_bits(amax_b));
  }
}

// Whole SR blocks through quantize_values (the kernels' per-block code) against quantize_element,
// blocks made to hold what the fast path cannot round alone: values tiny against the block scale
// (down to and past the point where |v| / s rounds to zero) and uniforms of 0 (a word below 256),
// so that blocks with both must take the reference path; the rest are ordinary.
template <Grid G, ScaleMode M>
__global__ void check_sr_blocks(uint64_t samples, Report* r) {
  constexpr int N = 16;
  for (uint64_t k = blockIdx.x * static_cast<uint64_t>(blockDim.x) + threadIdx.x; k < samples;
       k += static_cast<uint64_t>(gridDim.x) * blockDim.x) {
    const Philox4 w = sample_words(k, 6);
    const int max_index = G == Grid::e2m1 ? 4 + static_cast<int>(w.w[0] % 4u) : 1 + static_cast<int>(w.w[0] % 7u);
    const float gmax = grid_magnitude(G, max_index);
    const float amax_b = random_float(w.w[1], w.w[2], -40, 40, false);
    float v[N], u24[N];
    for (int j = 0; j < N; ++j) {
      const Philox4 e = sample_words(k * N + j, 7);
      const float frac = static_cast<float>(e.w[0] >> 8) * (1.0f / 16777216.0f);
      v[j] = amax_b * frac * exp2_int(-static_cast<int>(e.w[1] % 161u));  // down to 2^-160 of amax
      if ((e.w[1] & 0x70000u) == 0) v[j] = 0.0f;
      if (e.w[2] & 1u) v[j] = -v[j];
      u24[j] = uniform24(e.w[3]);
      if ((e.w[2] & 0x1e0u) == 0 || ((w.w[3] & 7u) == 0 && j == static_cast<int>(w.w[3] >> 28))) u24[j] = 0.0f;
    }
    v[w.w[3] % N] = (w.w[3] & 0x100u) ? -amax_b : amax_b;
    float amax = 0.0f;
    for (int j = 0; j < N; ++j) amax = fmaxf(amax, fabsf(v[j]));
    const TensorScale ts = make_tensor_scale(amax * 3.0f, gmax);
    const BlockScale bs = make_block_scale(M, amax, gmax, ts);
    float q[N];
    uint32_t code[N];
    for (int j = 0; j < N; ++j) q[j] = v[j];
    quantize_values<N, G, Rounding::sr, M, true>(q, code, bs, true, max_index, [&](int j) { return u24[j]; });
    for (int j = 0; j < N; ++j) {
      const QuantizedElement want = quantize_element(v[j], bs, G, max_index, Rounding::sr, uniform_from_u24(u24[j]));
      if (hw_float_to_bf16(q[j]) != want.out || code[j] != want.code) report(r, float_bits(v[j]), float_bits(amax));
    }
  }
}

// reciprocal_in_range against __frcp_rn on every float of [2^-60, 2^60] (the fast division's
// divisors) and its negatives.
__global__ void check_reciprocal(Report* r) {
  constexpr uint32_t lo = 0x21800000u /* 2^-60 */, hi = 0x5d800000u /* 2^60 */;
  for (uint64_t k = blockIdx.x * static_cast<uint64_t>(blockDim.x) + threadIdx.x; k <= hi - lo;
       k += static_cast<uint64_t>(gridDim.x) * blockDim.x) {
    for (uint32_t sign : {0u, 0x80000000u}) {
      const float s = bits_float((lo + static_cast<uint32_t>(k)) | sign);
      if (float_bits(reciprocal_in_range(s)) != float_bits(__frcp_rn(s))) report(r, float_bits(s), 0);
    }
  }
}

// block_scale and block_scale_pair against make_block_scale on every finite amax >= 0 (+0 and the
// subnormals included), for each gmax of `gmaxes` and, for e4m3x2, each tensor scale of `amax_ts`
// (make_tensor_scale of that tensor amax). The pair gets amax and a neighbouring pattern.
template <ScaleMode M>
__global__ void check_block_scale(const float* gmaxes, int n_gmax, const float* amax_ts, int n_ts, Report* r) {
  for (uint64_t k = blockIdx.x * static_cast<uint64_t>(blockDim.x) + threadIdx.x; k < 0x7f800000ull;
       k += static_cast<uint64_t>(gridDim.x) * blockDim.x) {
    const float amax = bits_float(static_cast<uint32_t>(k));
    const float other = bits_float(static_cast<uint32_t>(k) ^ 0x00c00001u);  // finite: the exponent's top bit is kept
    for (int g = 0; g < n_gmax; ++g)
      for (int t = 0; t < (M == ScaleMode::e4m3x2 ? n_ts : 1); ++t) {
        const float gmax = gmaxes[g];
        const TensorScale ts = make_tensor_scale(amax_ts[t], gmax);
        const BlockScaler sc = make_block_scaler<M>(gmax, ts);
        const BlockScale want = make_block_scale(M, amax, gmax, ts), want2 = make_block_scale(M, other, gmax, ts);
        const BlockScale got = block_scale<M>(sc, amax);
        BlockScale p0, p1;
        block_scale_pair<M>(sc, amax, other, p0, p1);
        auto same = [](const BlockScale& a, const BlockScale& b) {
          return float_bits(a.stored) == float_bits(b.stored) && float_bits(a.mul) == float_bits(b.mul) &&
                 a.divide == b.divide && a.zero_block == b.zero_block;
        };
        if (!same(got, want) || !same(p0, want) || !same(p1, want2)) report(r, k, (uint64_t{1} << 32) | float_bits(gmax));
      }
  }
}

constexpr int kGrid = 132 * 16, kBlock = 256;

template <Grid G, ScaleMode M>
void check_sr_blocks_of() {
  DeviceReport rep;
  check_sr_blocks<G, M><<<kGrid, kBlock>>>(uint64_t{1} << 24, rep.get());
  const Report r = rep.read();
  INFO("grid " << static_cast<int>(G) << " scale " << static_cast<int>(M) << "; value / block amax as bits");
  INFO(describe(r));
  CHECK(r.mismatches == 0);
}

template <Grid G, Rounding R, ScaleMode M>
void check_elements_of() {
  DeviceReport rep;
  check_elements<G, R, M><<<kGrid, kBlock>>>(uint64_t{1} << 28, rep.get());
  const Report r = rep.read();
  INFO("grid " << static_cast<int>(G) << " rounding " << static_cast<int>(R) << " scale " << static_cast<int>(M));
  INFO(describe(r));
  CHECK(r.mismatches == 0);
}

}  // namespace

TEST_CASE("gpu element rounding: nearest magnitude equals numerics.h on every float", "[gpu]") {
  DeviceReport e2m1, e1m2;
  check_nearest<Grid::e2m1><<<kGrid, kBlock>>>(4, e2m1.get());
  check_nearest<Grid::e1m2><<<kGrid, kBlock>>>(1, e1m2.get());
  const Report a = e2m1.read(), b = e1m2.read();
  INFO("e2m1: " << describe(a));
  INFO("e1m2: " << describe(b));
  CHECK(a.mismatches == 0);
  CHECK(b.mismatches == 0);
}

TEST_CASE("gpu element rounding: stochastic magnitude equals numerics.h on every float", "[gpu]") {
  DeviceReport e2m1, e1m2;
  check_stochastic<Grid::e2m1><<<kGrid, kBlock>>>(4, e2m1.get());
  check_stochastic<Grid::e1m2><<<kGrid, kBlock>>>(1, e1m2.get());
  const Report a = e2m1.read(), b = e1m2.read();
  INFO("e2m1: " << describe(a));
  INFO("e1m2: " << describe(b));
  CHECK(a.mismatches == 0);
  CHECK(b.mismatches == 0);
}

TEST_CASE("gpu element rounding: the hardware bf16 conversions (one and two at a time) are float_to_bf16 on every non-NaN", "[gpu]") {
  DeviceReport rep;
  check_bf16<<<kGrid, kBlock>>>(rep.get());
  const Report r = rep.read();
  INFO(describe(r));
  CHECK(r.mismatches == 0);
}

TEST_CASE("gpu element rounding: the fast fp32 division is the IEEE quotient", "[gpu]") {
  DeviceReport rep;
  check_division<<<kGrid, kBlock>>>(uint64_t{1} << 33, rep.get());
  const Report r = rep.read();
  INFO(describe(r));
  CHECK(r.mismatches == 0);
}

TEST_CASE("gpu element rounding: the fast fp32 division is the IEEE quotient on every pair of significands", "[gpu]") {
  DeviceReport rep;
  check_division_pairs<<<1u << 23, kBlock>>>(rep.get());
  const Report r = rep.read();
  INFO("v / s as bits; " << describe(r));
  CHECK(r.mismatches == 0);
}

TEST_CASE("gpu element rounding: the block amax reduction keeps the amax bits and the finiteness test", "[gpu]") {
  DeviceReport rep;
  check_absmax<<<kGrid, kBlock>>>(rep.get());
  const Report r = rep.read();
  INFO(describe(r));
  CHECK(r.mismatches == 0);
}

TEST_CASE("gpu element rounding: whole elements equal quantize_element", "[gpu]") {
  check_elements_of<Grid::e2m1, Rounding::rn, ScaleMode::fp32>();
  check_elements_of<Grid::e2m1, Rounding::sr, ScaleMode::fp32>();
  check_elements_of<Grid::e1m2, Rounding::rn, ScaleMode::fp32>();
  check_elements_of<Grid::e1m2, Rounding::sr, ScaleMode::fp32>();
  check_elements_of<Grid::e2m1, Rounding::rn, ScaleMode::e4m3x2>();
  check_elements_of<Grid::e2m1, Rounding::sr, ScaleMode::e4m3x2>();
  check_elements_of<Grid::e1m2, Rounding::rn, ScaleMode::e4m3x2>();
  check_elements_of<Grid::e1m2, Rounding::sr, ScaleMode::e4m3x2>();
  check_elements_of<Grid::e2m1, Rounding::rn, ScaleMode::e8m0>();
  check_elements_of<Grid::e2m1, Rounding::sr, ScaleMode::e8m0>();
  check_elements_of<Grid::e1m2, Rounding::rn, ScaleMode::e8m0>();
  check_elements_of<Grid::e1m2, Rounding::sr, ScaleMode::e8m0>();
}

TEST_CASE("gpu element rounding: SR blocks with tiny values and zero uniforms equal quantize_element", "[gpu]") {
  check_sr_blocks_of<Grid::e2m1, ScaleMode::fp32>();
  check_sr_blocks_of<Grid::e1m2, ScaleMode::fp32>();
  check_sr_blocks_of<Grid::e2m1, ScaleMode::e4m3x2>();
  check_sr_blocks_of<Grid::e1m2, ScaleMode::e4m3x2>();
}

TEST_CASE("gpu element rounding: the range-checked reciprocal is __frcp_rn on its whole range", "[gpu]") {
  DeviceReport rep;
  check_reciprocal<<<kGrid, kBlock>>>(rep.get());
  const Report r = rep.read();
  INFO(describe(r));
  CHECK(r.mismatches == 0);
}

TEST_CASE("gpu element rounding: the fused kernels' block scales equal make_block_scale on every finite amax", "[gpu]") {
  // Every clip of both grids (gmax), and tensor scales from small, unit, large and odd tensor amaxes.
  const std::vector<float> gmaxes = {0.5f, 1.0f, 1.5f, 2.0f, 3.0f, 4.0f, 5.0f, 6.0f, 7.0f};
  const std::vector<float> amax_ts = {1.0f, 3.7f, 1.0e-3f, 2.5e5f, 1.0e-30f, 6.0e30f};
  DeviceArray<float> g(gmaxes.size()), t(amax_ts.size());
  g.upload(gmaxes);
  t.upload(amax_ts);
  DeviceReport fp32, e4m3x2;
  check_block_scale<ScaleMode::fp32><<<kGrid, kBlock>>>(g.get(), static_cast<int>(gmaxes.size()), t.get(), 1, fp32.get());
  check_block_scale<ScaleMode::e4m3x2>
      <<<kGrid, kBlock>>>(g.get(), 2, t.get(), static_cast<int>(amax_ts.size()), e4m3x2.get());  // gmax 0.5, 1
  DeviceReport e4m3x2_presets;
  check_block_scale<ScaleMode::e4m3x2>
      <<<kGrid, kBlock>>>(g.get() + 7, 2, t.get(), static_cast<int>(amax_ts.size()), e4m3x2_presets.get());  // 6, 7
  const Report a = fp32.read(), b = e4m3x2.read(), c = e4m3x2_presets.read();
  INFO("amax bits / gmax bits; fp32: " << describe(a));
  INFO("e4m3x2, gmax 0.5 and 1: " << describe(b));
  INFO("e4m3x2, gmax 6 and 7: " << describe(c));
  CHECK(a.mismatches == 0);
  CHECK(b.mismatches == 0);
  CHECK(c.mismatches == 0);
}
