// numerics_identity.h — the version of fp4lab's training numerics: one number, kept here and
// nowhere else. Two runs of the same source and config at the same identity give the same bits on
// any Hopper GPU (and on the CPU engine on any machine); runs at two identities may not.
//
// The rule (docs/train.md "Numerics identity"): a commit that changes the bits any training run
// produces — the order of a sum, a rounding, a kernel's tiling of a reduction, on the CPU engine or
// the CUDA one — bumps kNumericsIdentity, names the change in bench/RESULTS.md and re-pins the
// golden bits (tests/test_golden_bits.cpp for the CPU, tests/gpu/golden_bits_test.cpp for the
// GPU), which fail until it does. Every run records it: the trainer's `run` row ("numerics") and
// checkpoints, the store's runs.numerics at ingest.
#pragma once

#include <string_view>

namespace fp4 {

// 1: every commit before 5ac9441 (the first study's binaries 7d41e4f, 8de04ec, 8ddfdcd among them).
// 2: 5ac9441, the block linears' weight gradients as a deterministic split-K (the order of their
//    fp32 sums; bench/RESULTS.md names it), up to the commit before 3.
// 3: the CUDA MoE blocks' expert forward and dgrad GEMMs as grouped cuBLAS calls (another kernel, so
//    another order of their fp32 sums; dense models and the CPU engine keep identity 2's bits).
// 4: the CUDA MoE blocks' router weight gradient as a deterministic split-K (the order of its fp32
//    sums), with 887bbca's padding of bf16 expert groups to 64 rows on the GPU (another GEMM shape),
//    which should have bumped the identity itself (docs/train.md says what that means for the
//    commits between); dense models and the CPU engine keep identity 2's bits.
inline constexpr int kNumericsIdentity = 4;

// A run of an MoE model on the GPU with FP4LAB_MOE_GROUPED_WGRAD=1 (docs/train.md: the experts'
// weight gradients in one grouped cuBLAS call, an opt-in for measuring it) has other bits from the
// same source: it records kMoeGroupedWgradIdentityOffset + kNumericsIdentity (1004 at identity 4),
// so that no resume and no sweep puts its steps beside the default's.
inline constexpr int kMoeGroupedWgradIdentityOffset = 1000;

// The identity of a run recorded before runs recorded one, from the git commit its binary was
// built from (the store's provenance.git_commit; 40 hex digits, or a prefix of at least 7): 1 or 2
// for a commit of main's history up to the one that began recording identities (the table in
// numerics_identity.cpp), 0 for any other commit (another branch's, "unknown"): not known.
// A build with uncommitted changes (git_dirty) is taken at its commit's identity: fp4lab cannot
// know what the change did.
int numerics_identity_of_commit(std::string_view git_commit);

}  // namespace fp4
