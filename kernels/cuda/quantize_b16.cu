// quantize_b16.cu — the fused quantize kernel for 16-element blocks (see quantize_kernels.cuh). One
// instance per file so that the instances compile in parallel.
#include "kernels/cuda/quantize_kernels.cuh"

namespace fp4::cuda::detail {

void launch_fused_b16(const FusedArgs& a, int tiles, int smem, cudaStream_t stream) {
  launch_fused<16>(a, tiles, smem, stream);
}

}  // namespace fp4::cuda::detail
