// cuda_common.cuh — what all CUDA code of fp4lab shares, on the host side: the check every CUDA
// runtime call goes through (FP4_CUDA_CHECK), the scratch Workspace, and DeviceArray, the one owner
// of device memory (the kernels' tables, the model's buffers, the optimizer's state, the tests').
//
// Plain C++ (no nvcc needed, no Catch, no library headers): .cpp files include it as well as .cu.
#pragma once

#include <cuda_runtime.h>

#include <algorithm>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

namespace fp4::cuda {

// Throws std::runtime_error("file:line: what: CUDA error text") when `err` is not cudaSuccess.
void throw_on_cuda_error(cudaError_t err, const char* what, const char* file, int line);

}  // namespace fp4::cuda

// Every CUDA runtime call of the kernels, the engine's CUDA backend, the tests and the benchmarks
// goes through this.
#define FP4_CUDA_CHECK(expr) ::fp4::cuda::throw_on_cuda_error((expr), #expr, __FILE__, __LINE__)

namespace fp4::cuda {

// How many device allocations DeviceArray has made in this process. A captured CUDA graph holds
// raw device pointers, so its owner replays it only while this count is the one it was captured
// at: any allocation since (a buffer grown, reallocated or new) may have moved what it points to.
inline std::atomic<uint64_t>& device_allocation_count() {
  static std::atomic<uint64_t> count{0};
  return count;
}

// n values of T in device memory, freed with the array. Reallocating (reserve beyond size()) drops
// the contents. The copies to and from the host are synchronous.
template <typename T>
class DeviceArray {
 public:
  // No memory yet: get() is null until reserve().
  DeviceArray() = default;
  // n values, contents undefined. There is device memory even for n = 0, so get() is never null.
  explicit DeviceArray(size_t n) {
    allocate(std::max<size_t>(n, 1));
    size_ = n;
  }
  // A device copy of h.
  explicit DeviceArray(const std::vector<T>& h) : DeviceArray(h.size()) { upload(h); }
  ~DeviceArray() {
    if (ptr_ != nullptr) cudaFree(ptr_);  // a destructor must not throw; nothing to do on failure
  }
  DeviceArray(const DeviceArray&) = delete;
  DeviceArray& operator=(const DeviceArray&) = delete;
  DeviceArray(DeviceArray&& o) noexcept : ptr_(std::exchange(o.ptr_, nullptr)), size_(std::exchange(o.size_, 0)) {}
  DeviceArray& operator=(DeviceArray&& o) noexcept {
    std::swap(ptr_, o.ptr_);
    std::swap(size_, o.size_);
    return *this;
  }

  // At least n values: grows (dropping the contents) when n > size(), else changes nothing.
  void reserve(size_t n) {
    if (n <= size_) return;
    if (ptr_ != nullptr) FP4_CUDA_CHECK(cudaFree(ptr_));  // synchronizes: earlier users are done
    ptr_ = nullptr;
    size_ = 0;
    allocate(n);
    size_ = n;
  }

  T* get() { return ptr_; }
  const T* get() const { return ptr_; }
  size_t size() const { return size_; }

  // Copies h (h.size() == size(), else std::invalid_argument) to the device.
  void upload(const std::vector<T>& h) {
    if (h.size() != size_)
      throw std::invalid_argument("DeviceArray::upload: " + std::to_string(h.size()) + " values for an array of " +
                                  std::to_string(size_));
    if (size_ > 0) FP4_CUDA_CHECK(cudaMemcpy(ptr_, h.data(), size_ * sizeof(T), cudaMemcpyHostToDevice));
  }
  // The size() values, after the whole device is idle: an earlier kernel's asynchronous error is
  // reported here rather than by some later call.
  std::vector<T> download() const {
    std::vector<T> h(size_);
    FP4_CUDA_CHECK(cudaDeviceSynchronize());
    if (size_ > 0) FP4_CUDA_CHECK(cudaMemcpy(h.data(), ptr_, size_ * sizeof(T), cudaMemcpyDeviceToHost));
    return h;
  }
  // Sets every byte of the size() values to `byte`.
  void fill_bytes(unsigned char byte) {
    if (size_ > 0) FP4_CUDA_CHECK(cudaMemset(ptr_, byte, size_ * sizeof(T)));
  }

 private:
  void allocate(size_t n) {
    FP4_CUDA_CHECK(cudaMalloc(&ptr_, n * sizeof(T)));
    device_allocation_count().fetch_add(1, std::memory_order_relaxed);
  }

  T* ptr_ = nullptr;
  size_t size_ = 0;
};

// n values of T in page-locked host memory (cudaMallocHost), freed with the array: an
// asynchronous copy from it returns at once, where one from pageable memory waits until the driver
// has staged the bytes (and with the stream busy, in practice until the stream reaches the copy).
// The caller keeps the values unchanged until the copy has run. Reallocating drops the contents.
template <typename T>
class PinnedArray {
 public:
  PinnedArray() = default;
  ~PinnedArray() {
    if (ptr_ != nullptr) cudaFreeHost(ptr_);  // a destructor must not throw
  }
  PinnedArray(const PinnedArray&) = delete;
  PinnedArray& operator=(const PinnedArray&) = delete;

  // At least n values: grows (dropping the contents) when n > size(), else changes nothing.
  void reserve(size_t n) {
    if (n <= size_) return;
    if (ptr_ != nullptr) FP4_CUDA_CHECK(cudaFreeHost(ptr_));
    ptr_ = nullptr;
    size_ = 0;
    FP4_CUDA_CHECK(cudaMallocHost(reinterpret_cast<void**>(&ptr_), n * sizeof(T)));
    size_ = n;
  }
  T* get() { return ptr_; }
  size_t size() const { return size_; }

 private:
  T* ptr_ = nullptr;
  size_t size_ = 0;
};

// Scratch device memory for the reductions' partial results (the quantizer's amax pass, the
// norms, the probe's sums). One per stream: calls that share a workspace must be ordered on one
// stream. Allocated on first use.
class Workspace {
 public:
  // Device memory of at least `bytes` bytes (synchronous allocation the first time, or on growth).
  void* get(size_t bytes) {
    storage_.reserve(bytes);
    return storage_.get();
  }

  // One device counter that is zero between calls: a kernel whose CTAs count themselves done on it
  // (the last one then finishes the reduction) leaves it at zero again. Apart from the scratch
  // bytes, which other calls overwrite; allocated on first use and zeroed on `stream` then, ahead
  // of the kernel the caller launches there. Like the scratch bytes, it is first used outside a
  // stream capture (the engine runs each shape's first pass directly, then captures the next):
  // a first use inside a capture would put the zeroing into the graph, so the counter would be
  // zero only once that graph had run.
  unsigned* zeroed_counter(cudaStream_t stream) {
    if (counter_.size() == 0) {
      counter_.reserve(1);
      FP4_CUDA_CHECK(cudaMemsetAsync(counter_.get(), 0, sizeof(unsigned), stream));
    }
    return counter_.get();
  }

 private:
  DeviceArray<unsigned char> storage_;
  DeviceArray<unsigned> counter_;
};

}  // namespace fp4::cuda
