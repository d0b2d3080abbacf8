// numerics_test_helpers.h — small helpers shared by the numerics tests (test_grids, test_scales,
// test_stochastic_rounding, test_rht, test_philox, test_quantize_reference).
//
// Everything here is independent of kernels/numerics.h on purpose: bf16 inputs are built by
// truncating fp32 values that the tests choose to be exactly representable (so no rounding code of
// the library is involved in making test inputs), and bf16 outputs are read by shifting the bits.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>
#include <stdexcept>
#include <string>
#include <vector>

namespace fp4test {

inline uint32_t bits_of(float x) {
  uint32_t u;
  std::memcpy(&u, &x, sizeof u);
  return u;
}

inline float float_of(uint32_t u) {
  float x;
  std::memcpy(&x, &u, sizeof x);
  return x;
}

// fp32 -> bf16 bits for a value that must be exact in bf16 (low 16 bits zero); anything else is a
// mistake in the test itself.
inline uint16_t bf(float x) {
  const uint32_t u = bits_of(x);
  if ((u & 0xffffu) != 0 && !std::isnan(x))
    throw std::logic_error("test input " + std::to_string(x) + " is not exact in bf16");
  return static_cast<uint16_t>(u >> 16);
}

// fp32 -> bf16 by truncation (for pseudo-random test data, where any bf16 value will do).
inline uint16_t bf_trunc(float x) { return static_cast<uint16_t>(bits_of(x) >> 16); }

inline float fl(uint16_t h) { return float_of(static_cast<uint32_t>(h) << 16); }

inline bool bf_is_nan(uint16_t h) { return (h & 0x7f80u) == 0x7f80u && (h & 0x007fu) != 0; }

inline std::vector<uint16_t> to_bf(const std::vector<float>& v) {
  std::vector<uint16_t> r(v.size());
  for (size_t i = 0; i < v.size(); ++i) r[i] = bf(v[i]);
  return r;
}

// A tiny deterministic generator for test data (xorshift64*), so tests do not depend on the
// standard library's distributions.
struct TestRng {
  uint64_t s;
  explicit TestRng(uint64_t seed) : s(seed * 0x9E3779B97F4A7C15ull + 1) {}
  uint64_t next() {
    s ^= s >> 12;
    s ^= s << 25;
    s ^= s >> 27;
    return s * 0x2545F4914F6CDD1Dull;
  }
  // Uniform in [-1, 1), a multiple of 2^-23.
  float sym() { return static_cast<float>(static_cast<int64_t>(next() >> 40) - (1 << 23)) / 8388608.0f; }
};

}  // namespace fp4test
