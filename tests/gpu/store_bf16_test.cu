// [gpu] The element-wise kernels' bf16 rounding (kernels/cuda/ops_common.cuh: the hardware
// conversion, NaNs by numerics.h's software path) against float_to_bf16 and round_to_bf16 on every
// float, NaNs included, one, two and four at a time with the float in each position.
#include <catch2/catch.hpp>

#include <cstdint>

#include "kernels/cuda/ops_common.cuh"
#include "kernels/numerics.h"
#include "tests/gpu/device_report.cuh"

namespace {

using fp4::test::report;

// Every 32-bit pattern x: to_bf16 and stored (rounded and not) against numerics.h; pack_bf16x4 (and
// bf16x2_bits on the first two) with x in each of the four positions beside three patterns derived
// from x (so NaNs and non-NaNs share a group in every combination somewhere), each half against
// float_to_bf16.
__global__ void check_every_float(fp4::test::Report* m) {
  using fp4::bits_float;
  using fp4::float_bits;
  using fp4::float_to_bf16;
  for (uint64_t k = blockIdx.x * static_cast<uint64_t>(blockDim.x) + threadIdx.x; k <= 0xffffffffull;
       k += static_cast<uint64_t>(gridDim.x) * blockDim.x) {
    const uint32_t u = static_cast<uint32_t>(k);
    const float x = bits_float(u);
    const fp4::bf16_t h = fp4::cuda::detail::to_bf16(x);
    if (h != float_to_bf16(x)) report(m, k, h);
    const uint32_t rounded = float_bits(fp4::cuda::detail::stored(x, true));
    if (rounded != float_bits(fp4::round_to_bf16(x))) report(m, k, rounded);
    if (float_bits(fp4::cuda::detail::stored(x, false)) != u) report(m, k, float_bits(fp4::cuda::detail::stored(x, false)));
    const float v[4] = {x, bits_float(u ^ 0x00400001u), bits_float(u * 2654435761u), bits_float(~u)};
    for (int pos = 0; pos < 4; ++pos) {
      const float a = v[pos], b = v[(pos + 1) % 4], c = v[(pos + 2) % 4], d = v[(pos + 3) % 4];
      const uint2 p = fp4::cuda::detail::pack_bf16x4(a, b, c, d);
      if ((p.x & 0xffffu) != float_to_bf16(a) || (p.x >> 16) != float_to_bf16(b) ||
          (p.y & 0xffffu) != float_to_bf16(c) || (p.y >> 16) != float_to_bf16(d))
        report(m, k, (static_cast<uint64_t>(p.y) << 32) | p.x);
      const uint32_t q = fp4::cuda::detail::bf16x2_bits(a, b);
      if ((q & 0xffffu) != float_to_bf16(a) || (q >> 16) != float_to_bf16(b)) report(m, k, q);
    }
  }
}

}  // namespace

TEST_CASE("gpu element-wise bf16 rounding is float_to_bf16 on every float, NaNs included", "[gpu]") {
  fp4::test::DeviceReport rep;
  check_every_float<<<132 * 16, 256>>>(rep.get());
  const fp4::test::Report r = rep.read();
  INFO(fp4::test::describe(r));
  CHECK(r.mismatches == 0);
}
