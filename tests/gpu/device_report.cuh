// device_report.cuh — how the exhaustive [gpu] checks (element_test.cu, store_bf16_test.cu) count
// mismatches on the device: a count and the first mismatching input with what it gave, as raw
// bits, read back once the kernel is done.
#pragma once

#include <cstdint>
#include <cstdio>
#include <string>

#include "kernels/cuda/cuda_common.cuh"

namespace fp4::test {

struct Report {
  unsigned long long mismatches;
  unsigned long long first_a, first_b;
  int seen;
};

__device__ inline void report(Report* r, uint64_t a, uint64_t b) {
  atomicAdd(&r->mismatches, 1ull);
  if (atomicCAS(&r->seen, 0, 1) == 0) {
    r->first_a = a;
    r->first_b = b;
  }
}

class DeviceReport {
 public:
  DeviceReport() : report_(1) { report_.fill_bytes(0); }
  Report* get() { return report_.get(); }
  Report read() {
    FP4_CUDA_CHECK(cudaGetLastError());
    return report_.download()[0];  // after the device is idle
  }

 private:
  fp4::cuda::DeviceArray<Report> report_;
};

inline std::string describe(const Report& r) {
  char buf[160];
  std::snprintf(buf, sizeof buf, "%llu mismatches; first: 0x%llx / 0x%llx", r.mismatches, r.first_a, r.first_b);
  return buf;
}

}  // namespace fp4::test
