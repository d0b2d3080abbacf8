// gemm.cu — see gemm.cuh: the cuBLASLt wrapper.
//
// Row-major to cuBLASLt's column-major: a row-major matrix X [r, c] with row stride ld is the
// column-major matrix Xᵀ [c, r] with leading dimension ld, so C = op(A)·op(B) (row-major) is
// computed as Cᵀ = op(B)ᵀ · op(A)ᵀ (column-major): cuBLASLt's first operand is our B, its second
// our A, its sizes (n, m, k), and each operand keeps its own transpose flag.
#include "kernels/cuda/gemm.cuh"

#include <cublasLt.h>

#include <algorithm>
#include <map>
#include <stdexcept>
#include <string>
#include <type_traits>

#include "kernels/cuda/cuda_common.cuh"  // FP4_CUDA_CHECK
#include "kernels/cuda/ops_common.cuh"   // row_grid, aligned

namespace fp4::cuda {

namespace {

void check_cublas(cublasStatus_t status, const char* what, int line) {
  if (status == CUBLAS_STATUS_SUCCESS) return;
  throw std::runtime_error(std::string(__FILE__) + ":" + std::to_string(line) + ": " + what + ": " +
                           cublasLtGetStatusName(status) + ": " + cublasLtGetStatusString(status));
}
#define FP4_CUBLAS_CHECK(expr) check_cublas((expr), #expr, __LINE__)

// The largest power of two (at most 256, cuBLASLt's default assumption) dividing the address: the
// heuristic must only offer algorithms that work with the buffers as they are aligned.
uint32_t alignment_of(const void* p) {
  const auto a = reinterpret_cast<uintptr_t>(p);
  const uintptr_t low = a & (~a + 1);
  return static_cast<uint32_t>(low == 0 || low > 256 ? 256 : low);
}

struct PlanKey {
  bool trans_a, trans_b, out_bf16, in_f32;
  bool device_scalars;  // CUBLASLT_POINTER_MODE_DEVICE: alpha and beta are device pointers
  int m, n, k, batch;
  int64_t lda, ldb, ldc, stride_a, stride_b, stride_c;
  uint32_t align_a, align_b, align_c;
  auto operator<=>(const PlanKey&) const = default;
};

// Descriptors and the chosen algorithm for one key. Owns the cuBLASLt objects.
struct Plan {
  cublasLtMatmulDesc_t desc = nullptr;
  cublasLtMatrixLayout_t first = nullptr, second = nullptr, out = nullptr;  // cuBLASLt's A, B, C/D
  cublasLtMatmulAlgo_t algo{};

  Plan() = default;
  Plan(const Plan&) = delete;
  Plan& operator=(const Plan&) = delete;
  ~Plan() {  // a destructor must not throw; nothing to do on failure
    if (out) cublasLtMatrixLayoutDestroy(out);
    if (second) cublasLtMatrixLayoutDestroy(second);
    if (first) cublasLtMatrixLayoutDestroy(first);
    if (desc) cublasLtMatmulDescDestroy(desc);
  }
};

// A layout for a row-major matrix stored [rows, cols] with row stride ld: column-major [cols, rows].
cublasLtMatrixLayout_t make_layout(cudaDataType_t type, int rows, int cols, int64_t ld, int batch,
                                   int64_t stride) {
  cublasLtMatrixLayout_t layout = nullptr;
  FP4_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&layout, type, static_cast<uint64_t>(cols),
                                              static_cast<uint64_t>(rows), ld));
  if (batch > 1) {
    const int32_t count = batch;
    FP4_CUBLAS_CHECK(cublasLtMatrixLayoutSetAttribute(layout, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, &count,
                                                      sizeof(count)));
    FP4_CUBLAS_CHECK(cublasLtMatrixLayoutSetAttribute(layout, CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET,
                                                      &stride, sizeof(stride)));
  }
  return layout;
}

}  // namespace

struct Gemm::Impl {
  cublasLtHandle_t handle = nullptr;
  DeviceArray<unsigned char> workspace;  // cuBLASLt's; none when workspace_bytes is 0
  size_t workspace_bytes = 0;
  std::map<PlanKey, std::unique_ptr<Plan>> plans;

  ~Impl() {
    plans.clear();
    if (handle) cublasLtDestroy(handle);
  }

  const Plan& plan(const PlanKey& key);
  // in_f32: a and b point to fp32 (else bf16) elements. alpha and beta point to host floats, or
  // with device_scalars to device floats.
  void run(const GemmShape& s, const float* alpha, const void* a, const void* b, const float* beta, void* c,
           bool out_bf16, bool in_f32, bool device_scalars, cudaStream_t stream);
};

// Split-K's fixed-order sum: c[i, j] = (beta == 0 ? 0 : beta·c[i, j]) + p[0][i, j] + … + p[chunks − 1][i, j]
// (with alpha: prior + alpha·(p[0] + … + p[chunks − 1]), the sum starting from +0). Threads walk
// (row i, unit u) over a detail::row_grid: a unit is column u, or with kVec the columns 4u .. 4u+3
// (n and ldc multiples of 4, c 16-byte aligned: one 16-byte access per partial and per output).
// Each element gets the same operations in the same order either way; the partials' loads do not
// depend on the running sum, so they are in flight together.
template <bool kVec>
__global__ void split_k_sum_kernel(const float* partials, int chunks, int m, int n, float beta, const float* alpha,
                                   float* c, int64_t ldc) {
  constexpr int W = kVec ? 4 : 1;
  using V = std::conditional_t<kVec, float4, float>;
  const size_t plane = static_cast<size_t>(m) * n;
  const unsigned units = static_cast<unsigned>(n / W);
  for (unsigned i = blockIdx.y * blockDim.y + threadIdx.y; i < static_cast<unsigned>(m); i += gridDim.y * blockDim.y) {
    for (unsigned u = blockIdx.x * blockDim.x + threadIdx.x; u < units; u += gridDim.x * blockDim.x) {
      const size_t e = static_cast<size_t>(i) * n + static_cast<size_t>(W) * u;
      V* out = reinterpret_cast<V*>(c + static_cast<size_t>(i) * static_cast<size_t>(ldc) + static_cast<size_t>(W) * u);
      float prior[W], acc[W];
      if (beta == 0.0f) {  // C is not read
#pragma unroll
        for (int q = 0; q < W; ++q) prior[q] = 0.0f;
      } else {
        const V o = *out;
        const float* of = reinterpret_cast<const float*>(&o);
#pragma unroll
        for (int q = 0; q < W; ++q) prior[q] = beta * of[q];
      }
#pragma unroll
      for (int q = 0; q < W; ++q) acc[q] = alpha == nullptr ? prior[q] : 0.0f;
#pragma unroll 8
      for (int p = 0; p < chunks; ++p) {
        const V v = *reinterpret_cast<const V*>(partials + static_cast<size_t>(p) * plane + e);
        const float* vf = reinterpret_cast<const float*>(&v);
#pragma unroll
        for (int q = 0; q < W; ++q) acc[q] += vf[q];
      }
      if (alpha != nullptr) {
        const float a = *alpha;
#pragma unroll
        for (int q = 0; q < W; ++q) acc[q] = prior[q] + a * acc[q];
      }
      V r;
      float* rf = reinterpret_cast<float*>(&r);
#pragma unroll
      for (int q = 0; q < W; ++q) rf[q] = acc[q];
      *out = r;
    }
  }
}

__global__ void scale_product_kernel(const float* a, const float* b, float* out) {
  *out = (a ? *a : 1.0f) * (b ? *b : 1.0f);  // one IEEE multiply (--fmad=false: nothing to contract)
}

const Plan& Gemm::Impl::plan(const PlanKey& key) {
  if (auto it = plans.find(key); it != plans.end()) return *it->second;
  // A device-scalar plan takes the algorithm of the host-scalar plan of the same shape (made first),
  // so that both modes give the same bits; a bf16-output plan (bf16 operands) takes the algorithm
  // of the fp32-output plan of the same shape, so that its outputs are that plan's fp32 results
  // rounded once by the epilogue (tests/gpu/ops_test.cpp holds the two to it, bit for bit).
  const Plan* host_plan = nullptr;
  if (key.device_scalars) {
    PlanKey host_key = key;
    host_key.device_scalars = false;
    host_plan = &plan(host_key);
  } else if (key.out_bf16 && !key.in_f32) {
    PlanKey f32_key = key;
    f32_key.out_bf16 = false;
    host_plan = &plan(f32_key);
  }
  auto p = std::make_unique<Plan>();
  FP4_CUBLAS_CHECK(cublasLtMatmulDescCreate(&p->desc, CUBLAS_COMPUTE_32F, CUDA_R_32F));
  if (key.device_scalars) {
    const cublasLtPointerMode_t mode = CUBLASLT_POINTER_MODE_DEVICE;
    FP4_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_POINTER_MODE, &mode, sizeof(mode)));
  }
  // cuBLASLt's first operand is our B (its transpose flag is ours for B), its second our A.
  const cublasOperation_t op_first = key.trans_b ? CUBLAS_OP_T : CUBLAS_OP_N;
  const cublasOperation_t op_second = key.trans_a ? CUBLAS_OP_T : CUBLAS_OP_N;
  FP4_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_TRANSA, &op_first, sizeof(op_first)));
  FP4_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_TRANSB, &op_second, sizeof(op_second)));
  // Our B is stored [n, k] with trans_b, else [k, n]; our A [k, m] with trans_a, else [m, k].
  const cudaDataType_t in_type = key.in_f32 ? CUDA_R_32F : CUDA_R_16BF;
  p->first = make_layout(in_type, key.trans_b ? key.n : key.k, key.trans_b ? key.k : key.n, key.ldb,
                         key.batch, key.stride_b);
  p->second = make_layout(in_type, key.trans_a ? key.k : key.m, key.trans_a ? key.m : key.k, key.lda,
                          key.batch, key.stride_a);
  p->out = make_layout(key.out_bf16 ? CUDA_R_16BF : CUDA_R_32F, key.m, key.n, key.ldc, key.batch, key.stride_c);

  if (host_plan != nullptr) {
    cublasLtMatmulHeuristicResult_t check{};
    if (cublasLtMatmulAlgoCheck(handle, p->desc, p->first, p->second, p->out, p->out, &host_plan->algo, &check) ==
            CUBLAS_STATUS_SUCCESS &&
        check.state == CUBLAS_STATUS_SUCCESS && check.workspaceSize <= workspace_bytes) {
      p->algo = host_plan->algo;  // already confirmed free of split-K when the host plan was made
      const Plan& ref = *p;
      plans.emplace(key, std::move(p));
      return ref;
    }
    // Rejected: ask the heuristic below instead, still without split-K,
    // deterministic, but then not necessarily the other plan's bits.
  }

  cublasLtMatmulPreference_t pref = nullptr;
  FP4_CUBLAS_CHECK(cublasLtMatmulPreferenceCreate(&pref));
  cublasLtMatmulHeuristicResult_t results[8] = {};
  int returned = 0;
  cublasStatus_t status = CUBLAS_STATUS_SUCCESS;
  {
    const uint64_t ws = workspace_bytes;
    const uint32_t scheme = CUBLASLT_REDUCTION_SCHEME_NONE;
    const uint32_t align_first = key.align_b, align_second = key.align_a, align_out = key.align_c;
    status = cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof(ws));
    if (status == CUBLAS_STATUS_SUCCESS)
      status = cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_REDUCTION_SCHEME_MASK, &scheme,
                                                    sizeof(scheme));
    if (status == CUBLAS_STATUS_SUCCESS)
      status = cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES,
                                                    &align_first, sizeof(align_first));
    if (status == CUBLAS_STATUS_SUCCESS)
      status = cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES,
                                                    &align_second, sizeof(align_second));
    if (status == CUBLAS_STATUS_SUCCESS)
      status = cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, &align_out,
                                                    sizeof(align_out));
    if (status == CUBLAS_STATUS_SUCCESS)
      status = cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, &align_out,
                                                    sizeof(align_out));
    if (status == CUBLAS_STATUS_SUCCESS)
      status = cublasLtMatmulAlgoGetHeuristic(handle, p->desc, p->first, p->second, p->out, p->out, pref, 8,
                                              results, &returned);
  }
  cublasLtMatmulPreferenceDestroy(pref);
  FP4_CUBLAS_CHECK(status);

  // The mask already excludes split-K; check the configuration anyway, so that a library that
  // ignored the mask cannot slip a non-deterministic reduction in.
  bool found = false;
  for (int i = 0; i < returned && !found; ++i) {
    if (results[i].state != CUBLAS_STATUS_SUCCESS) continue;
    uint32_t splits = 1, scheme = CUBLASLT_REDUCTION_SCHEME_NONE;
    size_t written = 0;
    FP4_CUBLAS_CHECK(cublasLtMatmulAlgoConfigGetAttribute(&results[i].algo, CUBLASLT_ALGO_CONFIG_SPLITK_NUM,
                                                          &splits, sizeof(splits), &written));
    FP4_CUBLAS_CHECK(cublasLtMatmulAlgoConfigGetAttribute(&results[i].algo, CUBLASLT_ALGO_CONFIG_REDUCTION_SCHEME,
                                                          &scheme, sizeof(scheme), &written));
    if (splits <= 1 && scheme == CUBLASLT_REDUCTION_SCHEME_NONE) {
      p->algo = results[i].algo;
      found = true;
    }
  }
  if (!found)
    throw std::runtime_error("gemm: cuBLASLt offers no algorithm without split-K for m = " + std::to_string(key.m) +
                             ", n = " + std::to_string(key.n) + ", k = " + std::to_string(key.k) +
                             " (heuristic returned " + std::to_string(returned) + ")");
  const Plan& ref = *p;
  plans.emplace(key, std::move(p));
  return ref;
}

void Gemm::Impl::run(const GemmShape& s, const float* alpha, const void* a, const void* b, const float* beta,
                     void* c, bool out_bf16, bool in_f32, bool device_scalars, cudaStream_t stream) {
  auto fail = [&](const std::string& what) {
    throw std::invalid_argument("gemm (m = " + std::to_string(s.m) + ", n = " + std::to_string(s.n) +
                                ", k = " + std::to_string(s.k) + "): " + what);
  };
  if (s.m < 1 || s.n < 1 || s.k < 1 || s.batch < 1) fail("m, n, k and batch must be >= 1");
  if (a == nullptr || b == nullptr || c == nullptr) fail("a null operand");
  const int a_cols = s.trans_a ? s.m : s.k;  // row lengths of A and B as stored
  const int b_cols = s.trans_b ? s.k : s.n;
  const int64_t lda = s.lda == 0 ? a_cols : s.lda, ldb = s.ldb == 0 ? b_cols : s.ldb,
                ldc = s.ldc == 0 ? s.n : s.ldc;
  if (lda < a_cols) fail("lda = " + std::to_string(lda) + " is below A's row length " + std::to_string(a_cols));
  if (ldb < b_cols) fail("ldb = " + std::to_string(ldb) + " is below B's row length " + std::to_string(b_cols));
  if (ldc < s.n) fail("ldc = " + std::to_string(ldc) + " is below C's row length " + std::to_string(s.n));
  if (s.batch > 1) {
    if (s.stride_a < 0 || s.stride_b < 0) fail("negative batch strides");
    if (s.stride_c < (s.m - 1) * ldc + s.n) fail("batch items of C overlap (stride_c = " + std::to_string(s.stride_c) + ")");
  }
  const PlanKey key{s.trans_a, s.trans_b, out_bf16, in_f32, device_scalars, s.m, s.n, s.k, s.batch, lda, ldb, ldc,
                    s.batch > 1 ? s.stride_a : 0, s.batch > 1 ? s.stride_b : 0, s.batch > 1 ? s.stride_c : 0,
                    alignment_of(a), alignment_of(b), alignment_of(c)};
  const Plan& p = plan(key);
  FP4_CUBLAS_CHECK(cublasLtMatmul(handle, p.desc, alpha, b, p.first, a, p.second, beta, c, p.out, c, p.out,
                                  &p.algo, workspace.get(), workspace_bytes, stream));
}

Gemm::Gemm(size_t workspace_bytes) : impl_(std::make_unique<Impl>()) {
  FP4_CUBLAS_CHECK(cublasLtCreate(&impl_->handle));
  if (workspace_bytes > 0) impl_->workspace = DeviceArray<unsigned char>(workspace_bytes);
  impl_->workspace_bytes = workspace_bytes;
}

Gemm::~Gemm() = default;

void Gemm::matmul(const GemmShape& shape, float alpha, const bf16_t* a, const bf16_t* b, float beta, float* c,
                  cudaStream_t stream) {
  impl_->run(shape, &alpha, a, b, &beta, c, false, false, false, stream);
}

void Gemm::matmul(const GemmShape& shape, float alpha, const bf16_t* a, const bf16_t* b, float beta, bf16_t* c,
                  cudaStream_t stream) {
  impl_->run(shape, &alpha, a, b, &beta, c, true, false, false, stream);
}

void Gemm::matmul(const GemmShape& shape, float alpha, const float* a, const float* b, float beta, float* c,
                  cudaStream_t stream) {
  impl_->run(shape, &alpha, a, b, &beta, c, false, true, false, stream);
}

namespace {

// The dense, unbatched shape of Gemm::gemm and Gemm::gemm_device_scalars.
GemmShape dense_shape(bool trans_a, bool trans_b, int m, int n, int k) {
  GemmShape s;
  s.trans_a = trans_a;
  s.trans_b = trans_b;
  s.m = m;
  s.n = n;
  s.k = k;
  return s;
}

}  // namespace

void Gemm::gemm(bool trans_a, bool trans_b, int m, int n, int k, float alpha, const bf16_t* a, const bf16_t* b,
                float beta, float* c, cudaStream_t stream) {
  impl_->run(dense_shape(trans_a, trans_b, m, n, k), &alpha, a, b, &beta, c, false, false, false, stream);
}

void Gemm::gemm(bool trans_a, bool trans_b, int m, int n, int k, float alpha, const bf16_t* a, const bf16_t* b,
                float beta, bf16_t* c, cudaStream_t stream) {
  impl_->run(dense_shape(trans_a, trans_b, m, n, k), &alpha, a, b, &beta, c, true, false, false, stream);
}

void Gemm::gemm_device_scalars(bool trans_a, bool trans_b, int m, int n, int k, const float* alpha, const bf16_t* a,
                               const bf16_t* b, const float* beta, float* c, cudaStream_t stream) {
  if (alpha == nullptr || beta == nullptr) throw std::invalid_argument("gemm: null device alpha or beta");
  impl_->run(dense_shape(trans_a, trans_b, m, n, k), alpha, a, b, beta, c, false, false, true, stream);
}

void Gemm::gemm_device_scalars(bool trans_a, bool trans_b, int m, int n, int k, const float* alpha, const bf16_t* a,
                               const bf16_t* b, const float* beta, bf16_t* c, cudaStream_t stream) {
  if (alpha == nullptr || beta == nullptr) throw std::invalid_argument("gemm: null device alpha or beta");
  impl_->run(dense_shape(trans_a, trans_b, m, n, k), alpha, a, b, beta, c, true, false, true, stream);
}

namespace {

// Validates a split-K product and returns the strided-batched shape of its partial products.
GemmShape split_k_parts(const GemmShape& shape, int chunks, const float* c, const float* partials) {
  const std::string where = "gemm split-K (m = " + std::to_string(shape.m) + ", n = " + std::to_string(shape.n) +
                            ", k = " + std::to_string(shape.k) + ", chunks = " + std::to_string(chunks) + "): ";
  if (shape.batch != 1) throw std::invalid_argument(where + "batch must be 1");
  if (chunks < 1 || shape.k < 1 || shape.k % chunks != 0) throw std::invalid_argument(where + "chunks must divide k");
  if (c == nullptr || partials == nullptr) throw std::invalid_argument(where + "a null output or workspace");
  if (shape.m < 1 || shape.n < 1) throw std::invalid_argument(where + "m and n must be >= 1");
  const int kc = shape.k / chunks;
  const int64_t lda = shape.lda == 0 ? (shape.trans_a ? shape.m : shape.k) : shape.lda;
  const int64_t ldb = shape.ldb == 0 ? (shape.trans_b ? shape.k : shape.n) : shape.ldb;
  const int64_t ldc = shape.ldc == 0 ? shape.n : shape.ldc;
  if (ldc < shape.n) throw std::invalid_argument(where + "ldc is below C's row length");
  // Chunk p takes K indices [p·kc, (p + 1)·kc): rows of A stored [k, m] (trans_a) or columns of A
  // stored [m, k]; columns of B stored [n, k] (trans_b) or rows of B stored [k, n].
  GemmShape part = dense_shape(shape.trans_a, shape.trans_b, shape.m, shape.n, kc);
  part.lda = lda;
  part.ldb = ldb;
  part.ldc = shape.n;
  part.batch = chunks;
  part.stride_a = shape.trans_a ? kc * lda : kc;
  part.stride_b = shape.trans_b ? kc : kc * ldb;
  part.stride_c = static_cast<int64_t>(shape.m) * shape.n;
  return part;
}

// C = beta·C + the partials in chunk order (times *alpha when alpha is not null).
void sum_partials(const GemmShape& shape, int chunks, const float* partials, float beta, const float* alpha, float* c,
                  cudaStream_t stream) {
  const int64_t ldc = shape.ldc == 0 ? shape.n : shape.ldc;
  // partials come from cudaMalloc and each plane holds m·n floats, so with n % 4 == 0 every
  // partial's group of four is 16-byte aligned.
  const bool vec = shape.n % 4 == 0 && ldc % 4 == 0 && detail::aligned(c, 16) && detail::aligned(partials, 16);
  const detail::RowGrid g = detail::row_grid(shape.m, vec ? shape.n / 4 : shape.n);
  if (vec)
    split_k_sum_kernel<true><<<g.grid, g.block, 0, stream>>>(partials, chunks, shape.m, shape.n, beta, alpha, c, ldc);
  else
    split_k_sum_kernel<false><<<g.grid, g.block, 0, stream>>>(partials, chunks, shape.m, shape.n, beta, alpha, c, ldc);
  FP4_CUDA_CHECK(cudaGetLastError());
}

}  // namespace

void Gemm::matmul_split_k(const GemmShape& shape, int chunks, float alpha, const float* a, const float* b, float beta,
                          float* c, float* partials, cudaStream_t stream) {
  const GemmShape part = split_k_parts(shape, chunks, c, partials);
  const float zero = 0.0f;
  impl_->run(part, &alpha, a, b, &zero, partials, false, true, false, stream);
  sum_partials(shape, chunks, partials, beta, nullptr, c, stream);
}

void Gemm::matmul_split_k(const GemmShape& shape, int chunks, const float* device_alpha, const bf16_t* a,
                          const bf16_t* b, float beta, float* c, float* partials, cudaStream_t stream) {
  const GemmShape part = split_k_parts(shape, chunks, c, partials);
  const float one = 1.0f, zero = 0.0f;
  impl_->run(part, &one, a, b, &zero, partials, false, false, false, stream);
  sum_partials(shape, chunks, partials, beta, device_alpha, c, stream);
}

void Gemm::scale_product(const float* a, const float* b, float* out, cudaStream_t stream) {
  scale_product_kernel<<<1, 1, 0, stream>>>(a, b, out);
  FP4_CUDA_CHECK(cudaGetLastError());
}

size_t Gemm::cached_plans() const { return impl_->plans.size(); }

}  // namespace fp4::cuda
