// The strip kernels' division by a runtime divisor (kernels/cuda/quantize/strip_divider.h): one multiply and
// one shift must give n / d exactly for every n in [0, 2^31) the kernels can pass. Checked here on
// the host, where the same function runs: every n below 2^16 and around every multiple of d up to
// there, and near 2^31 and near multiples of d there, for every d up to 4096 and for large and
// awkward divisors (powers of two, their neighbours, primes, 2^31 - 1).
#include <catch2/catch.hpp>

#include <cstdint>
#include <vector>

#include "kernels/cuda/quantize/strip_divider.h"

namespace {

using fp4::cuda::detail::make_strip_divider;
using fp4::cuda::detail::strip_quotient;

// The first n in [lo, hi) where the divider is wrong for d, or -1.
int64_t first_wrong(int d, int64_t lo, int64_t hi) {
  const auto s = make_strip_divider(d);
  for (int64_t n = lo; n < hi; ++n)
    if (strip_quotient(s, static_cast<int>(n)) != static_cast<int>(n / d)) return n;
  return -1;
}

// Around every multiple q * d of [lo, hi): q * d - 2 .. q * d + 1 (the quotient's steps).
int64_t first_wrong_at_steps(int d, int64_t lo, int64_t hi) {
  const auto s = make_strip_divider(d);
  for (int64_t q = lo / d; q * d < hi; ++q)
    for (int64_t n = q * d - 2; n <= q * d + 1; ++n) {
      if (n < lo || n >= hi) continue;
      if (strip_quotient(s, static_cast<int>(n)) != static_cast<int>(n / d)) return n;
    }
  return -1;
}

constexpr int64_t kTop = int64_t{1} << 31;

}  // namespace

TEST_CASE("strip divider: n / d for every d up to 4096, small n exhaustively, large n at every step", "[kernels][strip]") {
  for (int d = 1; d <= 4096; ++d) {
    INFO("d = " << d);
    REQUIRE(first_wrong(d, 0, 1 << 16) == -1);
    REQUIRE(first_wrong(d, kTop - 4 * d - 64, kTop) == -1);
    // Every multiple near the top of the range, where n * (m * d - 2^k) comes closest to 2^k.
    REQUIRE(first_wrong_at_steps(d, kTop - (int64_t{1} << 20), kTop) == -1);
  }
}

TEST_CASE("strip divider: large and awkward divisors", "[kernels][strip]") {
  std::vector<int> ds = {4097, 65535, 65536, 65537, 1000003, (1 << 20) - 1, (1 << 20) + 1, 0x7fffffff, 0x40000000,
                         0x40000001, 0x3fffffff, 46341, 999999937};
  for (int c = 12; c <= 30; ++c) {
    ds.push_back((1 << c) - 1);
    ds.push_back(1 << c);
    ds.push_back((1 << c) + 1);
  }
  for (int d : ds) {
    INFO("d = " << d);
    REQUIRE(first_wrong(d, 0, 1 << 16) == -1);
    REQUIRE(first_wrong(d, kTop - 4096, kTop) == -1);
    REQUIRE(first_wrong_at_steps(d, 0, kTop) == -1);
  }
}

TEST_CASE("strip divider: the multiplier and shift of small divisors", "[kernels][strip]") {
  // d = 1: k = 31, m = 2^31, so n * m >> 31 = n; d = 3: c = 2, k = 33, m = ceil(2^33 / 3).
  const auto one = make_strip_divider(1), three = make_strip_divider(3), four = make_strip_divider(4);
  CHECK(one.k == 31);
  CHECK(one.m == 0x80000000u);
  CHECK(three.k == 33);
  CHECK(three.m == 0xaaaaaaabu);
  CHECK(four.k == 33);
  CHECK(four.m == 0x80000000u);
}
