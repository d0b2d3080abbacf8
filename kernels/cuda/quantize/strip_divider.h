// strip_divider.h — n / d for 0 <= n < 2^31 by one multiply and one shift, for the strip kernels
// (quantize_rows.cu), which split each strip index into (row strip, column strip) twice per strip:
// an integer division by a runtime divisor compiles to some 30 instructions on sm_90.
// plain_strip_kernel (quantize_strips_plain.cu) instead walks its strips (locate once, then add the
// stride's position and carry), which keeps the walk's state in registers across its loop; it runs
// one CTA a SM with registers to spare. fused_strip_kernel's RN instances are at their 80-register
// cap (three CTAs a SM): carrying that walk spilled 22-48 bytes in its four fp32 RN instances,
// while the divider's constants live in the parameter bank and hold no register across the loop.
//
// The round-up method: with c = ceil(log2 d), k = 31 + c and m = ceil(2^k / d),
// floor(n * m / 2^k) = floor(n / d) for every n < 2^31, since n * m / 2^k = n / d + n * e / (d 2^k)
// with e = m * d - 2^k < d <= 2^c, so the excess is below 1 / d, less than the distance from n / d
// to the next integer. m < 2^32 for every d >= 1 (d > 2^(c-1), so 2^k / d < 2^32), and n * m < 2^63.
// Plain C++ (host and device), so the CPU tests check it (tests/test_strip_divider.cpp).
#pragma once

#include <cstdint>

#include "kernels/numerics.h"  // FP4_HD

namespace fp4::cuda::detail {

struct StripDivider {
  uint32_t d = 1;           // the divisor
  uint32_t m = 1u << 31;    // ceil(2^k / d)
  int k = 31;               // 31 + ceil(log2 d)
};

// d >= 1.
inline StripDivider make_strip_divider(int d) {
  StripDivider s;
  int c = 0;
  while ((int64_t{1} << c) < d) ++c;
  s.d = static_cast<uint32_t>(d);
  s.k = 31 + c;
  s.m = static_cast<uint32_t>(((uint64_t{1} << s.k) + s.d - 1) / s.d);
  return s;
}

// floor(n / s.d) for 0 <= n < 2^31.
FP4_HD int strip_quotient(const StripDivider& s, int n) {
  return static_cast<int>((static_cast<uint64_t>(static_cast<uint32_t>(n)) * s.m) >> s.k);
}

}  // namespace fp4::cuda::detail
