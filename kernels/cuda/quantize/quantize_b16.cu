// quantize_b16.cu — the fused quantize kernels for 16-element blocks (see quantize_kernels.cuh): the
// generic instance and those specialized for the fp32 and e4m3x2 families of both grids. One block
// size per file so that the two compile in parallel.
#include "kernels/cuda/quantize/quantize_kernels.cuh"

namespace fp4::cuda::detail {

void launch_fused_b16(const FusedArgs& a, int tiles, int smem, cudaStream_t stream) {
  launch_fused<16>(a, tiles, smem, stream);
}

}  // namespace fp4::cuda::detail
