// quant_metrics.cu — see quant_metrics.cuh. Two launches: metric_partials_kernel leaves one set of
// sums per CTA in the workspace, metric_finalize_kernel (one CTA) adds them into *out.
#include "kernels/cuda/quant_metrics.cuh"

#include <algorithm>
#include <cmath>
#include <stdexcept>
#include <string>

namespace fp4::cuda {

namespace {

constexpr int kThreads = 256;
constexpr int kWarps = kThreads / 32;
constexpr int kMaxBlocks = 1024;  // the partials fit the workspace; enough to fill any GPU
constexpr int kBins = cpu::kSignedCodeCount;

// One thread's (or CTA's) running sums.
struct Sums {
  double aa, ha, err2, abs_a, abs_h;
  unsigned long long count, nonfinite;
};

struct MetricArgs {
  const bf16_t* x;
  const bf16_t* dequant;
  const uint8_t* codes;
  const float* tensor_scale;
  int rows, cols;
  long long nvec;  // 16-vectors along the blocking axis
  bool along_rows, rht;
  uint16_t signs;
  bool wide;                // the 128-wide RHT (docs/recipes.md): A comes from wide_source
  uint32_t wide_signs[4];
};

// Butterfly sum over a warp: a + b == b + a exactly, so every lane ends with the same bits, and the
// association order is fixed by the lane numbering.
__device__ double warp_sum_f64(double v) {
  for (int off = 16; off > 0; off >>= 1) v += __shfl_xor_sync(0xffffffffu, v, off);
  return v;
}
__device__ unsigned long long warp_sum_u64(unsigned long long v) {
  for (int off = 16; off > 0; off >>= 1) v += __shfl_xor_sync(0xffffffffu, v, off);
  return v;
}

// The CTA's total of every thread's sums, left in thread 0's return value: each warp's butterfly,
// then thread 0 adds the warps' results in warp order. Every thread of the CTA calls it.
__device__ Sums cta_sum(Sums s) {
  __shared__ double warp_d[5][kWarps];
  __shared__ unsigned long long warp_n[2][kWarps];
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  const double d[5] = {warp_sum_f64(s.aa), warp_sum_f64(s.ha), warp_sum_f64(s.err2), warp_sum_f64(s.abs_a),
                       warp_sum_f64(s.abs_h)};
  const unsigned long long n[2] = {warp_sum_u64(s.count), warp_sum_u64(s.nonfinite)};
  if (lane == 0) {
    for (int i = 0; i < 5; ++i) warp_d[i][warp] = d[i];
    for (int i = 0; i < 2; ++i) warp_n[i][warp] = n[i];
  }
  __syncthreads();
  Sums t{0.0, 0.0, 0.0, 0.0, 0.0, 0ull, 0ull};
  if (threadIdx.x == 0) {
    for (int w = 0; w < kWarps; ++w) {
      t.aa += warp_d[0][w];
      t.ha += warp_d[1][w];
      t.err2 += warp_d[2][w];
      t.abs_a += warp_d[3][w];
      t.abs_h += warp_d[4][w];
      t.count += warp_n[0][w];
      t.nonfinite += warp_n[1][w];
    }
  }
  return t;
}

// The 16 values of vector v: source, dequantized, codes. Along rows (cols % 16 == 0) vector v is
// the flat elements 16v .. 16v + 15 (three 16-byte-or-wider loads); along columns it is column
// v % cols of rows 16·(v / cols) .. + 15, so a warp's 32 vectors read 32 adjacent columns of each
// row (coalesced).
__device__ void load_vector(const MetricArgs& a, long long v, float (&x)[16], float (&h)[16], uint8_t (&c)[16]) {
  if (a.along_rows) {
    const long long i = v * 16;
    const uint4* xs = reinterpret_cast<const uint4*>(a.x + i);
    const uint4* hs = reinterpret_cast<const uint4*>(a.dequant + i);
    const uint4 xw[2] = {__ldg(xs), __ldg(xs + 1)};
    const uint4 hw[2] = {__ldg(hs), __ldg(hs + 1)};
    const uint4 cw = __ldg(reinterpret_cast<const uint4*>(a.codes + i));
    const uint32_t xu[8] = {xw[0].x, xw[0].y, xw[0].z, xw[0].w, xw[1].x, xw[1].y, xw[1].z, xw[1].w};
    const uint32_t hu[8] = {hw[0].x, hw[0].y, hw[0].z, hw[0].w, hw[1].x, hw[1].y, hw[1].z, hw[1].w};
    const uint32_t cu[4] = {cw.x, cw.y, cw.z, cw.w};
#pragma unroll
    for (int j = 0; j < 8; ++j) {  // little-endian: element 2j in the low half
      x[2 * j] = bf16_to_float(static_cast<bf16_t>(xu[j] & 0xffffu));
      x[2 * j + 1] = bf16_to_float(static_cast<bf16_t>(xu[j] >> 16));
      h[2 * j] = bf16_to_float(static_cast<bf16_t>(hu[j] & 0xffffu));
      h[2 * j + 1] = bf16_to_float(static_cast<bf16_t>(hu[j] >> 16));
    }
#pragma unroll
    for (int j = 0; j < 16; ++j) c[j] = static_cast<uint8_t>(cu[j / 4] >> (8 * (j % 4)));
  } else {
    const long long r0 = (v / a.cols) * 16, col = v % a.cols;
#pragma unroll
    for (int j = 0; j < 16; ++j) {
      const long long i = (r0 + j) * a.cols + col;
      x[j] = bf16_to_float(__ldg(a.x + i));
      h[j] = bf16_to_float(__ldg(a.dequant + i));
      c[j] = __ldg(a.codes + i);
    }
  }
}

// A for vector v under the 128-wide RHT: its 128-group's source values rotated by rht128 (the
// quantizer's call on the same values), of which v is the 16-value part v % 8 along the axis. Each
// of the group's 8 vectors recomputes the rotation: probe steps only, exactness over speed.
__device__ void wide_source(const MetricArgs& a, long long v, float (&x)[16]) {
  float g[kRhtWideSize];
  long long base, step;
  int part;
  if (a.along_rows) {
    base = (v / 8) * kRhtWideSize;
    step = 1;
    part = static_cast<int>(v % 8);
  } else {
    const long long vr = v / a.cols, col = v % a.cols;
    base = (vr / 8) * kRhtWideSize * a.cols + col;
    step = a.cols;
    part = static_cast<int>(vr % 8);
  }
  for (int k = 0; k < kRhtWideSize; ++k) g[k] = bf16_to_float(__ldg(a.x + base + k * step));
  rht128(g, a.wide_signs);
  for (int j = 0; j < 16; ++j) x[j] = g[16 * part + j];
}

// Per-CTA sums over a fixed set of vectors (v = blockIdx.x · kThreads + threadIdx.x, stepping by
// the whole grid). The code histogram is kept per thread in shared memory (column threadIdx.x),
// then added per bin in thread order.
__global__ void __launch_bounds__(kThreads) metric_partials_kernel(const MetricArgs a, DeviceMetricSums* partials) {
  __shared__ unsigned hist[kBins][kThreads];
  for (int b = 0; b < kBins; ++b) hist[b][threadIdx.x] = 0u;
  Sums s{0.0, 0.0, 0.0, 0.0, 0.0, 0ull, 0ull};
  const double ts = static_cast<double>(*a.tensor_scale);
  const long long stride = static_cast<long long>(gridDim.x) * kThreads;
  for (long long v = static_cast<long long>(blockIdx.x) * kThreads + threadIdx.x; v < a.nvec; v += stride) {
    float x[16], h[16];
    uint8_t c[16];
    load_vector(a, v, x, h, c);
    if (a.wide) wide_source(a, v, x);
    else if (a.rht) rht16(x, a.signs);
    // cpu::QuantMetricsAccumulator::add, element by element (--fmad=false: one rounding per
    // operation, as on the CPU).
#pragma unroll
    for (int j = 0; j < 16; ++j) {
      const int bin = cpu::signed_code_bin(c[j]);
      const double av = x[j];
      const double hv = static_cast<double>(h[j]) * ts;
      if (bin < 0 || !isfinite(av) || !isfinite(hv)) {
        ++s.nonfinite;
        continue;
      }
      const double err = hv - av;
      s.aa += av * av;
      s.ha += hv * av;
      s.err2 += err * err;
      s.abs_a += fabs(av);
      s.abs_h += fabs(hv);
      ++s.count;
      ++hist[bin][threadIdx.x];
    }
  }
  const Sums t = cta_sum(s);  // its barrier also orders the histogram's writes before the reads
  if (threadIdx.x < kBins) {
    unsigned long long n = 0;
    for (int i = 0; i < kThreads; ++i) n += hist[threadIdx.x][i];
    partials[blockIdx.x].histogram[threadIdx.x] = static_cast<long long>(n);
  }
  if (threadIdx.x == 0) {
    DeviceMetricSums& p = partials[blockIdx.x];
    p.sum_aa = t.aa;
    p.sum_ha = t.ha;
    p.sum_err2 = t.err2;
    p.sum_abs_a = t.abs_a;
    p.sum_abs_h = t.abs_h;
    p.count = static_cast<long long>(t.count);
    p.coded = static_cast<long long>(t.count);  // with codes, every measured element is coded
    p.nonfinite = static_cast<long long>(t.nonfinite);
  }
}

// One CTA: thread i adds partials i, i + kThreads, ... in order, then the CTA's fixed tree.
__global__ void __launch_bounds__(kThreads) metric_finalize_kernel(const DeviceMetricSums* partials, int n,
                                                                   DeviceMetricSums* out) {
  Sums s{0.0, 0.0, 0.0, 0.0, 0.0, 0ull, 0ull};
  for (int i = threadIdx.x; i < n; i += kThreads) {
    const DeviceMetricSums& p = partials[i];
    s.aa += p.sum_aa;
    s.ha += p.sum_ha;
    s.err2 += p.sum_err2;
    s.abs_a += p.sum_abs_a;
    s.abs_h += p.sum_abs_h;
    s.count += static_cast<unsigned long long>(p.count);
    s.nonfinite += static_cast<unsigned long long>(p.nonfinite);
  }
  const Sums t = cta_sum(s);
  if (threadIdx.x < kBins) {
    long long h = 0;
    for (int i = 0; i < n; ++i) h += partials[i].histogram[threadIdx.x];
    out->histogram[threadIdx.x] = h;
  }
  if (threadIdx.x == 0) {
    out->sum_aa = t.aa;
    out->sum_ha = t.ha;
    out->sum_err2 = t.err2;
    out->sum_abs_a = t.abs_a;
    out->sum_abs_h = t.abs_h;
    out->count = static_cast<long long>(t.count);
    out->coded = static_cast<long long>(t.count);
    out->nonfinite = static_cast<long long>(t.nonfinite);
  }
}

bool aligned16(const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; }

}  // namespace

cpu::QuantMetricsSums host_sums(const DeviceMetricSums& d) {
  cpu::QuantMetricsSums s;
  s.sum_aa = d.sum_aa;
  s.sum_ha = d.sum_ha;
  s.sum_err2 = d.sum_err2;
  s.sum_abs_a = d.sum_abs_a;
  s.sum_abs_h = d.sum_abs_h;
  s.count = d.count;
  s.coded = d.coded;
  s.nonfinite = d.nonfinite;
  for (int b = 0; b < kBins; ++b) s.histogram[b] = d.histogram[b];
  return s;
}

void slot_metric_sums(const bf16_t* x, int rows, int cols, const QuantSpec& spec, const bf16_t* dequant,
                      const uint8_t* codes, const float* tensor_scale, DeviceMetricSums* out, Workspace& workspace,
                      cudaStream_t stream) {
  const bool along_rows = spec.along == BlockAlong::row;
  if (rows <= 0 || cols <= 0)
    throw std::invalid_argument("slot_metric_sums: tensor shape " + std::to_string(rows) + "x" +
                                std::to_string(cols) + " is empty");
  if ((along_rows ? cols : rows) % 16 != 0)
    throw std::invalid_argument(std::string("slot_metric_sums: 16-vectors do not tile the blocked ") +
                                (along_rows ? "columns" : "rows") + " (" +
                                std::to_string(along_rows ? cols : rows) + ")");
  if (x == nullptr || dequant == nullptr || codes == nullptr || tensor_scale == nullptr || out == nullptr ||
      !aligned16(x) || !aligned16(dequant) || !aligned16(codes))
    throw std::invalid_argument(
        "slot_metric_sums: the source, the copy and its codes must be 16-byte aligned device pointers, the "
        "tensor scale and the output device pointers");
  MetricArgs a{};
  a.x = x;
  a.dequant = dequant;
  a.codes = codes;
  a.tensor_scale = tensor_scale;
  a.rows = rows;
  a.cols = cols;
  a.nvec = static_cast<long long>(rows) * cols / 16;
  a.along_rows = along_rows;
  a.rht = spec.rht;
  a.signs = spec.rht_signs;
  a.wide = spec.rht && spec.rht_size == kRhtWideSize;
  for (int i = 0; i < 4; ++i) a.wide_signs[i] = spec.rht_wide_signs[i];
  if (a.wide && (along_rows ? cols : rows) % kRhtWideSize != 0)
    throw std::invalid_argument("slot_metric_sums: 128-vectors do not tile the blocked " +
                                std::string(along_rows ? "columns" : "rows"));
  // The grid depends on the shape only: the partial sums, and so the result, never on the device.
  const int blocks = static_cast<int>(std::min<long long>((a.nvec + kThreads - 1) / kThreads, kMaxBlocks));
  auto* partials = static_cast<DeviceMetricSums*>(workspace.get(kMaxBlocks * sizeof(DeviceMetricSums)));
  metric_partials_kernel<<<blocks, kThreads, 0, stream>>>(a, partials);
  FP4_CUDA_CHECK(cudaGetLastError());
  metric_finalize_kernel<<<1, kThreads, 0, stream>>>(partials, blocks, out);
  FP4_CUDA_CHECK(cudaGetLastError());
}

}  // namespace fp4::cuda
