// cuda_common.cu — see cuda_common.cuh.
#include "kernels/cuda/cuda_common.cuh"

#include <stdexcept>
#include <string>

namespace fp4::cuda {

void throw_on_cuda_error(cudaError_t err, const char* what, const char* file, int line) {
  if (err == cudaSuccess) return;
  throw std::runtime_error(std::string(file) + ":" + std::to_string(line) + ": " + what + ": " +
                           cudaGetErrorName(err) + ": " + cudaGetErrorString(err));
}

}  // namespace fp4::cuda
