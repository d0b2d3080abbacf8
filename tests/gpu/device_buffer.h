// device_buffer.h — device memory for the [gpu] tests: n values of T, freed on scope exit, with
// uploads checked for size and downloads that first surface any asynchronous kernel error.
#pragma once

#include <catch2/catch.hpp>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstddef>
#include <vector>

#include "kernels/cuda/quantize.cuh"  // FP4_CUDA_CHECK

namespace fp4::test {

template <class T>
class DeviceBuffer {
 public:
  explicit DeviceBuffer(size_t n) : n_(n) { FP4_CUDA_CHECK(cudaMalloc(&p_, std::max<size_t>(n, 1) * sizeof(T))); }
  explicit DeviceBuffer(const std::vector<T>& h) : DeviceBuffer(h.size()) { upload(h); }
  ~DeviceBuffer() { cudaFree(p_); }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;

  T* get() const { return p_; }
  // A byte pattern no output produces, so an element a kernel failed to write shows up.
  void poison() { FP4_CUDA_CHECK(cudaMemset(p_, 0xA5, n_ * sizeof(T))); }
  void upload(const std::vector<T>& h) {
    REQUIRE(h.size() == n_);
    FP4_CUDA_CHECK(cudaMemcpy(p_, h.data(), n_ * sizeof(T), cudaMemcpyHostToDevice));
  }
  std::vector<T> download() const {
    std::vector<T> h(n_);
    FP4_CUDA_CHECK(cudaDeviceSynchronize());  // surface any asynchronous kernel error here
    FP4_CUDA_CHECK(cudaMemcpy(h.data(), p_, n_ * sizeof(T), cudaMemcpyDeviceToHost));
    return h;
  }

 private:
  T* p_ = nullptr;
  size_t n_;
};

}  // namespace fp4::test
