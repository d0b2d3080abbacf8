// grouped_gemm.cu — see grouped_gemm.cuh: cuBLAS's grouped GEMM.
//
// Row-major to cuBLAS's column-major as in gemm.cu: C = op(A)·op(B) (row-major) is computed as
// Cᵀ = op(B)ᵀ · op(A)ᵀ (column-major): cuBLAS's first operand is our B, its second our A, its
// sizes (n, m, k), and each operand keeps its own transpose flag.
#include "kernels/cuda/grouped_gemm.cuh"

#include <cublas_v2.h>

#include <algorithm>
#include <stdexcept>
#include <string>
#include <type_traits>

#include "kernels/cuda/cuda_common.cuh"  // FP4_CUDA_CHECK, DeviceArray, PinnedArray

namespace fp4::cuda {

namespace {

void check_cublas(cublasStatus_t status, const char* what, int line) {
  if (status == CUBLAS_STATUS_SUCCESS) return;
  throw std::runtime_error(std::string(__FILE__) + ":" + std::to_string(line) + ": " + what + ": " +
                           cublasGetStatusName(status) + ": " + cublasGetStatusString(status));
}
#define FP4_CUBLAS_CHECK(expr) check_cublas((expr), #expr, __LINE__)

}  // namespace

// The operand pointers travel to the device through pinned staging slots: a copy from pageable
// memory would wait for the stream to reach it (cuda_common.cuh's PinnedArray), stalling the host
// at every call. A slot is written again only after its previous copy ran (its event). The
// forward waits for the GPU once per MoE block (the dispatch), so there the wait never blocks;
// the backward makes two calls per block without waiting, so in a model of more than
// kStagingSlots / 2 MoE blocks the host can catch up with a slot's pending copy and wait for it:
// a stall, never a wrong pointer.
constexpr int kStagingSlots = 8;

struct GroupedGemm::Impl {
  cublasHandle_t handle = nullptr;
  DeviceArray<void*> pointers;  // [A' | B' | C] of the last call: cuBLAS's operand order
  PinnedArray<void*> staging;   // kStagingSlots slots of slot_size pointers
  size_t slot_size = 0;
  int next_slot = 0;
  cudaEvent_t copied[kStagingSlots] = {};
  bool recorded[kStagingSlots] = {};
  // The call's per-group arrays, kept between calls to spare the allocations; cuBLAS reads the
  // operands behind the first two pointer arrays only.
  std::vector<void*> firsts, seconds, outs;
  std::vector<cublasOperation_t> op_first, op_second;
  std::vector<int> m, n, k, ld_first, ld_second, ld_out, group_size;
  std::vector<float> alpha, beta;
};

GroupedGemm::GroupedGemm() : impl_(std::make_unique<Impl>()) {
  FP4_CUBLAS_CHECK(cublasCreate(&impl_->handle));
  for (cudaEvent_t& e : impl_->copied) FP4_CUDA_CHECK(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
  // Host scalars, no atomics (cuBLAS's default, stated: the bits must not depend on timing), and
  // no reduced-precision math: CUBLAS_DEFAULT_MATH with CUBLAS_COMPUTE_32F, plus
  // CUBLAS_MATH_DISALLOW_REDUCED_PRECISION_REDUCTION: without that flag cuBLAS may reduce a split
  // product's partial sums in the output type (bf16 here), rounding more than once, where the
  // header promises fp32 accumulation rounded once to bf16.
  FP4_CUBLAS_CHECK(cublasSetPointerMode(impl_->handle, CUBLAS_POINTER_MODE_HOST));
  FP4_CUBLAS_CHECK(cublasSetAtomicsMode(impl_->handle, CUBLAS_ATOMICS_NOT_ALLOWED));
  const int math = CUBLAS_DEFAULT_MATH | CUBLAS_MATH_DISALLOW_REDUCED_PRECISION_REDUCTION;
  FP4_CUBLAS_CHECK(cublasSetMathMode(impl_->handle, static_cast<cublasMath_t>(math)));
}

GroupedGemm::~GroupedGemm() {  // a destructor must not throw: nothing to do on failure
  if (!impl_) return;
  for (cudaEvent_t e : impl_->copied)
    if (e != nullptr) cudaEventDestroy(e);
  if (impl_->handle) cublasDestroy(impl_->handle);
}

void GroupedGemm::run(bool trans_a, bool trans_b, const std::vector<GroupedProduct>& products, cudaStream_t stream) {
  call(trans_a, trans_b, products, stream);
}

void GroupedGemm::accumulate(bool trans_a, bool trans_b, const std::vector<GroupedAccumulation>& products,
                             cudaStream_t stream) {
  call(trans_a, trans_b, products, stream);
}

template <class Product>
void GroupedGemm::call(bool trans_a, bool trans_b, const std::vector<Product>& products, cudaStream_t stream) {
  constexpr bool kAccumulate = std::is_same_v<Product, GroupedAccumulation>;
  Impl& s = *impl_;
  s.firsts.clear();
  s.seconds.clear();
  s.outs.clear();
  s.op_first.clear();
  s.op_second.clear();
  s.m.clear();
  s.n.clear();
  s.k.clear();
  s.ld_first.clear();
  s.ld_second.clear();
  s.ld_out.clear();
  for (size_t i = 0; i < products.size(); ++i) {
    const Product& p = products[i];
    if (p.m < 0 || p.n < 0 || p.k < 0)
      throw std::invalid_argument("grouped gemm: product " + std::to_string(i) + " has a negative size");
    if (p.m == 0 || p.n == 0) continue;  // no output
    if (p.k == 0)
      throw std::invalid_argument("grouped gemm: product " + std::to_string(i) + " has k = 0 (leave it out)");
    // Our B is stored [n, k] with trans_b, else [k, n]; our A [k, m] with trans_a, else [m, k].
    const int64_t ldb = p.ldb != 0 ? p.ldb : (trans_b ? p.k : p.n);
    const int64_t lda = p.lda != 0 ? p.lda : (trans_a ? p.m : p.k);
    const int64_t ldc = p.ldc != 0 ? p.ldc : p.n;
    if (ldb > INT32_MAX || lda > INT32_MAX || ldc > INT32_MAX)
      throw std::invalid_argument("grouped gemm: product " + std::to_string(i) + " has a row stride over 2^31");
    if (ldb < (trans_b ? p.k : p.n) || lda < (trans_a ? p.m : p.k) || ldc < p.n)
      throw std::invalid_argument("grouped gemm: product " + std::to_string(i) + " has a row stride below its row");
    s.op_first.push_back(trans_b ? CUBLAS_OP_T : CUBLAS_OP_N);
    s.op_second.push_back(trans_a ? CUBLAS_OP_T : CUBLAS_OP_N);
    s.m.push_back(p.n);
    s.n.push_back(p.m);
    s.k.push_back(p.k);
    s.ld_first.push_back(static_cast<int>(ldb));
    s.ld_second.push_back(static_cast<int>(lda));
    s.ld_out.push_back(static_cast<int>(ldc));
    s.firsts.push_back(const_cast<bf16_t*>(p.b));
    s.seconds.push_back(const_cast<bf16_t*>(p.a));
    s.outs.push_back(p.c);
  }
  const int groups = static_cast<int>(s.m.size());
  if (groups == 0) return;
  s.group_size.assign(groups, 1);
  s.alpha.assign(groups, 1.0f);
  s.beta.assign(groups, kAccumulate ? 1.0f : 0.0f);
  const size_t count = 3 * static_cast<size_t>(groups);
  if (s.pointers.size() < count) s.pointers.reserve(count);
  if (s.slot_size < count) {  // grow every slot: first wait for the copies that read them
    for (int i = 0; i < kStagingSlots; ++i)
      if (s.recorded[i]) FP4_CUDA_CHECK(cudaEventSynchronize(s.copied[i]));
    s.staging.reserve(count * kStagingSlots);
    s.slot_size = count;
  }
  const int slot = s.next_slot;
  s.next_slot = (slot + 1) % kStagingSlots;
  if (s.recorded[slot]) FP4_CUDA_CHECK(cudaEventSynchronize(s.copied[slot]));
  void** staged = s.staging.get() + static_cast<size_t>(slot) * s.slot_size;
  std::copy(s.firsts.begin(), s.firsts.end(), staged);
  std::copy(s.seconds.begin(), s.seconds.end(), staged + groups);
  std::copy(s.outs.begin(), s.outs.end(), staged + 2 * groups);
  // In stream order: after the previous call's GEMMs have read the device array.
  FP4_CUDA_CHECK(cudaMemcpyAsync(s.pointers.get(), staged, count * sizeof(void*), cudaMemcpyHostToDevice, stream));
  FP4_CUDA_CHECK(cudaEventRecord(s.copied[slot], stream));
  s.recorded[slot] = true;
  void** first = s.pointers.get();
  void** second = first + groups;
  void** out = second + groups;
  FP4_CUBLAS_CHECK(cublasSetStream(s.handle, stream));
  FP4_CUBLAS_CHECK(cublasGemmGroupedBatchedEx(s.handle, s.op_first.data(), s.op_second.data(), s.m.data(), s.n.data(),
                                              s.k.data(), s.alpha.data(), first, CUDA_R_16BF, s.ld_first.data(), second,
                                              CUDA_R_16BF, s.ld_second.data(), s.beta.data(), out,
                                              kAccumulate ? CUDA_R_32F : CUDA_R_16BF, s.ld_out.data(), groups,
                                              s.group_size.data(), CUBLAS_COMPUTE_32F));
}

}  // namespace fp4::cuda
