// quantize_b32.cu — the fused quantize kernels for 32-element blocks (see quantize_kernels.cuh): the
// generic instance and those specialized for the e2m1 / e8m0 family (mxfp4). One block size per
// file so that the two compile in parallel.
#include "kernels/cuda/quantize/quantize_kernels.cuh"

namespace fp4::cuda::detail {

void launch_fused_b32(const FusedArgs& a, int tiles, int smem, cudaStream_t stream) {
  launch_fused<32>(a, tiles, smem, stream);
}

}  // namespace fp4::cuda::detail
