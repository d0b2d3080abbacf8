// test_model_moe.cpp — the mixture-of-experts model (docs/model.md, "Mixture of experts"): its
// presets, sizes and Philox sites; the router's kernels (known answers, ties, gradients); the
// SR keying of gathered rows; the whole model against the dense model and finite differences.
#include <cmath>
#include <cstdint>
#include <cstring>
#include <functional>
#include <map>
#include <set>
#include <string>
#include <vector>

#include <omp.h>

#include <catch2/catch.hpp>

#include "base/linear_sites.h"
#include "base/user_error.h"
#include "engine/model/model_shape.h"
#include "engine/model/transformer.h"
#include "engine/recipe.h"
#include "kernels/cpu/quantize.h"
#include "kernels/cpu/router.h"
#include "kernels/numerics.h"
#include "tests/test_model_helpers.h"
#include "tests/test_support.h"

using namespace fp4;
using namespace fp4::model;
using fp4::test::same_bits;
using fp4test_model::check_gradient;
using fp4test_model::Rng;

namespace {

struct Tokens {
  std::vector<int32_t> inputs, targets;
  Batch view(int batch, int seq) const { return Batch{inputs.data(), targets.data(), batch, seq}; }
};

Tokens random_tokens(int n, int vocab, uint64_t seed) {
  Rng rng(seed);
  Tokens t;
  for (int i = 0; i < n; ++i) {
    t.inputs.push_back(rng.below(vocab));
    t.targets.push_back(rng.below(vocab));
  }
  return t;
}

ModelShape with_moe(ModelShape c, int experts, int top_k, int d_ff_expert, int shared = 0) {
  c.moe.n_experts = experts;
  c.moe.top_k = top_k;
  c.moe.d_ff_expert = d_ff_expert;
  c.moe.n_shared = shared;
  c.moe.every = 1;
  c.moe.renormalize = top_k > 1;
  c.moe.balance_coef = kDefaultBalanceCoef;
  c.moe.z_coef = kDefaultZCoef;
  return c;
}

// The dense model's name of an MoE model's tensor that plays its part: expert `expert`'s linears
// are the dense MLP's; the router has none ("").
std::string dense_name(const std::string& moe_name, int expert) {
  const std::string tag = ".experts." + std::to_string(expert) + ".";
  const size_t at = moe_name.find(tag);
  if (at != std::string::npos) return moe_name.substr(0, at) + "." + moe_name.substr(at + tag.size());
  if (moe_name.find(".experts.") != std::string::npos || moe_name.find(".router") != std::string::npos) return "";
  return moe_name;
}

// Copies the dense model's weights into the MoE model's tensors that play their part.
template <typename M, typename D>
void copy_dense_into(const D& dense, M& moe, int expert) {
  for (const ParamView& v : moe.views()) {
    const std::string name = dense_name(v.name, expert);
    if (name.empty()) continue;
    const ParamView& dv = dense.view(name);
    REQUIRE(dv.size == v.size);
    std::copy_n(dense.params().begin() + dv.offset, dv.size, moe.params().begin() + v.offset);
  }
}

// A dense model with seeded weights and an MoE model whose expert 0 (and everything outside
// the MoE blocks) holds the dense model's weights; the rest keeps its own initialization.
struct Twins {
  Model dense, moe;
  Twins(const ModelShape& d, const ModelShape& m, const engine::Recipe& recipe, uint64_t seed)
      : dense(d, recipe, {}), moe(m, recipe, {}) {
    dense.init_params(seed);
    moe.init_params(seed + 1);
    copy_dense_into(dense, moe, 0);
  }
};

}  // namespace

TEST_CASE("moe presets: d<L>-e<E>k<K> is the dense shape with E experts, top-K, at the dense active width",
          "[model][moe]") {
  const ModelShape d4 = model_preset("d4");
  const ModelShape m = model_preset("d4-e8k2");
  CHECK(m.n_layers == d4.n_layers);
  CHECK(m.d_model == d4.d_model);
  CHECK(m.d_ff == d4.d_ff);
  CHECK(m.moe.n_experts == 8);
  CHECK(m.moe.top_k == 2);
  CHECK(m.moe.d_ff_expert == 352);  // 704 / 2
  CHECK(m.moe.renormalize);
  CHECK(m.moe.every == 1);
  CHECK(m.moe.n_shared == 0);
  CHECK(m.moe.balance_coef == kDefaultBalanceCoef);
  CHECK(m.moe.z_coef == kDefaultZCoef);
  CHECK_FALSE(model_preset("d4-e8k1").moe.renormalize);  // top-1 gates with the probability (Switch)
  CHECK(model_preset("d4-e8k1").moe.d_ff_expert == 704);

  // The width rule: d_ff / k to the nearest multiple of 32, ties up, at least 32.
  CHECK(default_d_ff_expert(704, 2) == 352);
  CHECK(default_d_ff_expert(704, 4) == 192);   // 176 = 5.5 · 32: a tie, up
  CHECK(default_d_ff_expert(704, 8) == 96);    // 88 = 2.75 · 32
  CHECK(default_d_ff_expert(64, 8) == 32);     // 8: never below 32
  CHECK(default_d_ff_expert(1024, 2) == 512);

  for (const char* bad : {"d4-e8", "d4-k2", "d4-e0k1", "d4-e8k0", "d4-e2k3", "d4-e8k2x", "d4e8k2", "d4-"}) {
    INFO(bad);
    CHECK_THROWS_AS(model_preset(bad), UserError);
  }
}

TEST_CASE("moe sizes: total, active and non-embedding parameters and active FLOPs by hand", "[model][moe]") {
  // d4-e8k2: d = 256, f_e = 352, E = 8, k = 2, L = 4, V = 256.
  const ModelShape m = model_preset("d4-e8k2");
  // MoE block: 4·256² + 2·256 (norms) + 8·256 (router) + 8 experts · 3·256·352
  //          = 262144 + 512 + 2048 + 2162688 = 2427392; active: 2 experts instead of 8 = 805376.
  CHECK(moe_block_params(m) == 2427392);
  CHECK(moe_block_active_params(m) == 805376);
  CHECK(nonembedding_params(m) == 9709824);         // 4 · 2427392 + 256
  CHECK(total_params(m) == 9840896);                // + 2 · 256 · 256
  CHECK(active_nonembedding_params(m) == 3221760);  // 4 · 805376 + 256
  CHECK(active_params(m) == 3352832);
  // 6 · 3221760 + 6 · 4 · 256 · 256: the dense d4's FLOPs plus the router's 6 · 4 · 8 · 256.
  CHECK(train_flops_per_token(m, 256) == 20903424.0);
  CHECK(train_flops_per_token(m, 256) - train_flops_per_token(model_preset("d4"), 256) == 6.0 * 4 * 8 * 256);

  // d6-e8k2, docs/model.md's table.
  const ModelShape m6 = model_preset("d6-e8k2");
  CHECK(nonembedding_params(m6) == 31873920);
  CHECK(total_params(m6) == 32070528);
  CHECK(active_nonembedding_params(m6) == 10640256);
  CHECK(active_params(m6) == 10836864);
  CHECK(train_flops_per_token(m6, 256) == 67380480.0);

  // Shared experts count in both; every = 2 puts MoE blocks at 1 and 3 only.
  ModelShape s = m;
  s.moe.n_shared = 1;
  s.moe.every = 2;
  CHECK(moe_block_count(s) == 2);
  CHECK_FALSE(is_moe_block(s, 0));
  CHECK(is_moe_block(s, 1));
  CHECK_FALSE(is_moe_block(s, 2));
  CHECK(is_moe_block(s, 3));
  const int64_t dense_block = block_params(s);
  CHECK(nonembedding_params(s) == 2 * dense_block + 2 * (moe_block_params(m) + 3 * 256 * 352) + 256);
  CHECK(active_nonembedding_params(s) == 2 * dense_block + 2 * (moe_block_active_params(m) + 3 * 256 * 352) + 256);

  // A dense model: the active counts are the counts.
  const ModelShape d4 = model_preset("d4");
  CHECK(active_nonembedding_params(d4) == nonembedding_params(d4));
  CHECK(active_params(d4) == total_params(d4));
}

TEST_CASE("moe Philox sites: expert 0 takes the dense MLP's, the others are distinct and above every dense site",
          "[model][moe]") {
  ModelShape m = model_preset("d4-e8k2");
  m.moe.n_shared = 2;
  m.moe.every = 2;
  std::set<uint32_t> seen;
  for (int b = 0; b < m.n_layers; ++b)
    for (int p = 0; p < kLinearsPerBlock; ++p) seen.insert(linear_site(b, p));
  for (int b = 0; b < m.n_layers; ++b) {
    if (!is_moe_block(m, b)) continue;
    CHECK(expert_linear_site(m, b, 0, 2) == linear_site(b, 2));
    CHECK(expert_linear_site(m, b, 0, 3) == linear_site(b, 3));
    for (int e = 1; e < m.moe.n_experts + m.moe.n_shared; ++e)
      for (int p : {2, 3}) {
        const uint32_t id = expert_linear_site(m, b, e, p);
        CHECK(id >= static_cast<uint32_t>(kLinearsPerBlock * m.n_layers));
        CHECK(seen.insert(id).second);
      }
  }
  // The last site fills the range exactly: 4·L + 2·(MoE blocks)·(E + S − 1).
  CHECK(*seen.rbegin() == static_cast<uint32_t>(4 * 4 + 2 * 2 * (8 + 2 - 1) - 1));

  // More sites than 16 bits hold: refused in one line.
  ModelShape big = model_explicit(64, 128, 2, 64, 0);
  big.moe = moe_preset(1024, 2, big.d_ff);
  const std::string e = config_error(big);
  CHECK(e == "model: 64 MoE blocks of 1024 experts need 131200 linear sites, more than the 65536 the random-stream "
             "packing allows (NUMERICS.md §6): use fewer experts or layers");
}

TEST_CASE("router kernels: known-answer balancing and z losses, and the tie rule", "[model][moe][router]") {
  // Two tokens, two experts, top-1: logits (0, 0) and (ln 3, 0). Softmax: (1/2, 1/2), (3/4, 1/4).
  // The tie of token 0 goes to expert 0; token 1 picks expert 0: f = (1, 0), P = (5/8, 3/8), so the
  // balancing loss is 2 · (1 · 5/8) = 5/4. lse = ln 2 and ln 4: z = (ln²2 + 4 ln²2) / 2.
  const std::vector<double> logits = {0.0, 0.0, std::log(3.0), 0.0};
  std::vector<double> scores(4), gates(2), lse(2);
  std::vector<int32_t> chosen(2);
  cpu::router_forward(logits.data(), 2, 2, 1, false, false, scores.data(), chosen.data(), gates.data(), lse.data());
  CHECK(chosen == std::vector<int32_t>{0, 0});
  CHECK(scores[2] == Approx(0.75).epsilon(1e-15));
  CHECK(gates[0] == Approx(0.5).epsilon(1e-15));
  CHECK(gates[1] == Approx(0.75).epsilon(1e-15));
  cpu::RouterLosses l = cpu::router_losses(scores.data(), chosen.data(), lse.data(), 2, 2, 1, false);
  CHECK(l.counts == std::vector<int64_t>{2, 0});
  CHECK(l.balance == Approx(1.25).epsilon(1e-14));
  const double ln2 = std::log(2.0);
  CHECK(l.z == Approx(2.5 * ln2 * ln2).epsilon(1e-14));

  // Perfect balance gives exactly 1: logits (1, 0) and (0, 1), top-1.
  const std::vector<double> balanced = {1.0, 0.0, 0.0, 1.0};
  cpu::router_forward(balanced.data(), 2, 2, 1, false, false, scores.data(), chosen.data(), gates.data(), lse.data());
  CHECK(chosen == std::vector<int32_t>{0, 1});
  l = cpu::router_losses(scores.data(), chosen.data(), lse.data(), 2, 2, 1, false);
  CHECK(l.balance == Approx(1.0).epsilon(1e-14));

  // Sigmoid scores are normalized per token for P: logits (0, 0) → s = (1/2, 1/2), s' = (1/2, 1/2);
  // the tie picks expert 0: balance = 2 · (1 · 1/2) = 1. Gates are σ itself (1/2) unless renormalized.
  std::vector<double> s1(2), g1(1), lse1(1);
  std::vector<int32_t> c1(1);
  cpu::router_forward(logits.data(), 1, 2, 1, true, false, s1.data(), c1.data(), g1.data(), lse1.data());
  CHECK(c1[0] == 0);
  CHECK(g1[0] == 0.5);
  CHECK(cpu::router_losses(s1.data(), c1.data(), lse1.data(), 1, 2, 1, true).balance == Approx(1.0).epsilon(1e-15));
  cpu::router_forward(logits.data(), 1, 2, 1, true, true, s1.data(), c1.data(), g1.data(), lse1.data());
  CHECK(g1[0] == 1.0);

  // Ties among several: (1, 3, 3, 3), top-2 → experts 1 and 2 (the lower indices of the tie), in
  // ascending order, renormalized gates 1/2 each.
  const std::vector<float> tie = {1.0f, 3.0f, 3.0f, 3.0f};
  std::vector<float> s4(4), g4(2), lse4(1);
  std::vector<int32_t> c4(2);
  cpu::router_forward(tie.data(), 1, 4, 2, false, true, s4.data(), c4.data(), g4.data(), lse4.data());
  CHECK(c4 == std::vector<int32_t>{1, 2});
  CHECK(g4[0] == 0.5f);
  CHECK(g4[1] == 0.5f);
  // The choice lists experts in ascending index whatever their rank: (5, 1, 9) top-2 → (0, 2).
  const std::vector<float> order = {5.0f, 1.0f, 9.0f};
  std::vector<float> s3(3), g3(2), lse3(1);
  std::vector<int32_t> c3(2);
  cpu::router_forward(order.data(), 1, 3, 2, false, false, s3.data(), c3.data(), g3.data(), lse3.data());
  CHECK(c3 == std::vector<int32_t>{0, 2});
  CHECK(g3[1] > g3[0]);
}

TEST_CASE("router kernels: the backward against finite differences in double", "[model][moe][router][gradcheck]") {
  const int R = 6, E = 5, K = 2;
  Rng rng(17);
  std::vector<double> logits = fp4test_model::uniform_vector(rng, R * E, -2.0, 2.0);
  const std::vector<double> dgates = fp4test_model::uniform_vector(rng, R * K, -1.0, 1.0);
  const double bscale = 0.3, zscale = 0.2;
  for (bool sigmoid : {false, true})
    for (bool renormalize : {false, true}) {
      INFO((sigmoid ? "sigmoid" : "softmax") << (renormalize ? ", renormalized" : ""));
      std::vector<double> scores(R * E), gates(R * K), lse(R), dlogits(R * E);
      std::vector<int32_t> chosen(R * K);
      // The objective: Σ dgates · gates + bscale · balance + zscale · z (f frozen: the choice does
      // not change under the small steps below, which the check of `chosen` confirms).
      const auto objective = [&] {
        cpu::router_forward(logits.data(), R, E, K, sigmoid, renormalize, scores.data(), chosen.data(), gates.data(),
                            lse.data());
        const cpu::RouterLosses l = cpu::router_losses(scores.data(), chosen.data(), lse.data(), R, E, K, sigmoid);
        double sum = 0;
        for (int i = 0; i < R * K; ++i) sum += dgates[i] * gates[i];
        return sum + bscale * l.balance + zscale * l.z;
      };
      objective();
      const std::vector<int32_t> base_choice = chosen;
      const cpu::RouterLosses l = cpu::router_losses(scores.data(), chosen.data(), lse.data(), R, E, K, sigmoid);
      cpu::router_backward(logits.data(), scores.data(), chosen.data(), lse.data(), dgates.data(), l.counts, R, E, K,
                           sigmoid, renormalize, bscale, zscale, dlogits.data());
      const double worst = check_gradient("dlogits", logits, dlogits, objective, 1e-6, 1e-9, 1e-7);
      INFO("largest |fd − analytic| = " << worst);
      CHECK(worst < 1e-8);
      objective();
      CHECK(chosen == base_choice);
    }
}

TEST_CASE("SR of gathered rows draws the source tensor's numbers (the expert groups' key)", "[model][moe][sr]") {
  // A dY [8, 32] and a group of its rows 1, 4, 6, 7 gathered: quantized along N (dgrad_dy's
  // blocking) with SR and the rows as source_rows, every element equals the full tensor's.
  const int rows = 8, cols = 32;
  Rng rng(3);
  std::vector<bf16_t> full(rows * cols);
  for (bf16_t& v : full) v = float_to_bf16(static_cast<float>(rng.normal()));
  QuantSpec spec = engine::slot_quant_spec(engine::recipe_preset("e2m1").slots[2], engine::Slot::dgrad_dy);
  REQUIRE(spec.rounding == Rounding::sr);
  spec.seed = 77;
  spec.stream = 1234;
  spec.step = 5;
  const std::vector<int32_t> group = {1, 4, 6, 7};
  std::vector<bf16_t> gathered;
  for (int32_t r : group) gathered.insert(gathered.end(), full.begin() + r * cols, full.begin() + (r + 1) * cols);
  const cpu::QuantizedTensor whole = cpu::quantize(full.data(), rows, cols, spec);
  const cpu::QuantizedTensor keyed = cpu::quantize(gathered.data(), 4, cols, spec, false, group.data());
  const cpu::QuantizedTensor unkeyed = cpu::quantize(gathered.data(), 4, cols, spec);
  int differ_unkeyed = 0;
  for (int i = 0; i < 4; ++i)
    for (int c = 0; c < cols; ++c) {
      CHECK(keyed.codes[i * cols + c] == whole.codes[group[i] * cols + c]);
      differ_unkeyed += unkeyed.codes[i * cols + c] != whole.codes[group[i] * cols + c];
    }
  CHECK(differ_unkeyed > 0);  // without the key the draws are the group's own, so some codes differ
}

TEST_CASE("one expert at the dense width, top-1, is the dense model bit for bit", "[model][moe]") {
  const ModelShape dense = model_explicit(2, 64, 2, 32, 128, 64);
  ModelShape one = with_moe(dense, 1, 1, 128);
  one.moe.z_coef = 0.0;  // the z-loss would move the router, and through it the inputs' gradients
  const Tokens tok = random_tokens(2 * 32, dense.vocab_size, 4);
  const StepContext ctx{42, 9, 1};
  for (const char* name : {"bf16", "e2m1", "ufp4", "nvfp4", "mxfp4"}) {
    INFO(name);
    Twins twins(dense, one, engine::recipe_preset(name), 5);
    Model &d = twins.dense, &m = twins.moe;
    const PassResult rd = d.forward_backward(tok.view(2, 32), ctx);
    const PassResult rm = m.forward_backward(tok.view(2, 32), ctx);
    REQUIRE_FALSE(rd.nonfinite);
    REQUIRE_FALSE(rm.nonfinite);
    CHECK(std::memcmp(&rd.loss, &rm.loss, sizeof rd.loss) == 0);
    REQUIRE(rm.moe.size() == 2);
    CHECK(rm.moe[0].counts == std::vector<int64_t>{64});
    CHECK(rm.moe[0].balance == 1.0);  // E · f · P = 1 · 1 · 1
    CHECK(rm.aux_loss == 2 * kDefaultBalanceCoef);
    for (const ParamView& v : m.views()) {
      const std::string dn = dense_name(v.name, 0);
      if (dn.empty()) continue;
      const ParamView& dv = d.view(dn);
      const std::vector<float> a(d.grads().begin() + dv.offset, d.grads().begin() + dv.offset + dv.size);
      const std::vector<float> b(m.grads().begin() + v.offset, m.grads().begin() + v.offset + v.size);
      INFO(v.name);
      CHECK(same_bits(a, b));
    }
    // Evaluation too.
    const EvalResult ed = d.evaluate(tok.view(2, 32), ctx), em = m.evaluate(tok.view(2, 32), ctx);
    CHECK(std::memcmp(&ed.loss_sum, &em.loss_sum, sizeof ed.loss_sum) == 0);
  }
}

TEST_CASE("all tokens to one expert: a zero router ties every token to expert 0", "[model][moe]") {
  // Four experts of width 64, top-1 renormalized (gate 1), no auxiliary losses: with the router at
  // zero every logit ties, every token goes to expert 0, and the model is the dense model of width
  // 64 with expert 0's weights, bit for bit; the other experts get no gradient.
  const ModelShape dense = model_explicit(2, 64, 2, 32, 64, 64);
  ModelShape moe = with_moe(dense, 4, 1, 64);
  moe.moe.renormalize = true;
  moe.moe.balance_coef = 0.0;
  moe.moe.z_coef = 0.0;
  const Tokens tok = random_tokens(64, dense.vocab_size, 8);
  for (const char* name : {"bf16", "e2m1"}) {
    INFO(name);
    Twins twins(dense, moe, engine::recipe_preset(name), 2);
    Model &d = twins.dense, &m = twins.moe;
    for (int b = 0; b < 2; ++b) {
      const ParamView& r = m.view("blocks." + std::to_string(b) + ".router");
      std::fill_n(m.params().begin() + r.offset, r.size, 0.0f);
    }
    const PassResult rd = d.forward_backward(tok.view(2, 32), {1, 2, 0});
    const PassResult rm = m.forward_backward(tok.view(2, 32), {1, 2, 0});
    CHECK(std::memcmp(&rd.loss, &rm.loss, sizeof rd.loss) == 0);
    for (const MoeLayerStats& st : rm.moe) {
      CHECK(st.counts == std::vector<int64_t>{64, 0, 0, 0});
      CHECK(st.balance == Approx(1.0).epsilon(1e-12));  // E · 1 · (1/E): P is uniform
    }
    for (const ParamView& v : m.views()) {
      INFO(v.name);
      const std::vector<float> b(m.grads().begin() + v.offset, m.grads().begin() + v.offset + v.size);
      const std::string dn = dense_name(v.name, 0);
      if (dn.empty()) {
        if (v.kind == ParamKind::router) continue;  // dlogits = p·(ds − p·ds) = 0, but W's gradient is hᵀ·0 = ±0
        CHECK(std::all_of(b.begin(), b.end(), [](float x) { return x == 0.0f; }));
        continue;
      }
      const ParamView& dv = d.view(dn);
      CHECK(same_bits(std::vector<float>(d.grads().begin() + dv.offset, d.grads().begin() + dv.offset + dv.size), b));
    }
  }
}

TEST_CASE("MoE gradients against finite differences in double: router, gates, balancing and z losses",
          "[model][moe][gradcheck]") {
  const engine::Recipe bf16 = engine::recipe_preset("bf16");
  struct Case {
    const char* what;
    bool sigmoid, renormalize;
    int top_k, shared, every;
  };
  for (const Case& k : {Case{"softmax top-2 renormalized, a shared expert", false, true, 2, 1, 1},
                        Case{"softmax top-1", false, false, 1, 0, 1},
                        Case{"sigmoid top-2, every other block", true, true, 2, 0, 2},
                        Case{"sigmoid top-2 unnormalized", true, false, 2, 1, 1}}) {
    INFO(k.what);
    ModelShape c = with_moe(model_explicit(2, 32, 2, 16, 64, 17), 4, k.top_k, 32, k.shared);
    c.moe.score = k.sigmoid ? RouterScore::sigmoid : RouterScore::softmax;
    c.moe.renormalize = k.renormalize;
    c.moe.every = k.every;
    c.moe.balance_coef = 0.5;  // large, so that their gradients are visible against the loss's
    c.moe.z_coef = 0.05;
    BasicModel<double> md(c, bf16, {}, Storage::fp32);
    Model mf(c, bf16, {}, Storage::fp32);
    mf.init_params(3);
    Rng grow(99);
    for (const ParamView& v : mf.views())
      for (int64_t i = 0; i < v.size; ++i) {
        float& p = mf.params()[v.offset + i];
        p = v.kind == ParamKind::norm_gain ? static_cast<float>(grow.uniform(0.5, 1.5)) : 8.0f * p;
      }
    md.params().assign(mf.params().begin(), mf.params().end());
    const Tokens tok = random_tokens(2 * 8, c.vocab_size, 11);
    const Batch batch = tok.view(2, 8);
    const PassResult r = md.forward_backward(batch, {});
    REQUIRE_FALSE(r.nonfinite);
    CHECK(r.aux_loss > 0);
    const std::vector<double> g = md.grads();
    std::vector<std::vector<int64_t>> counts;
    for (const MoeLayerStats& st : r.moe) counts.push_back(st.counts);
    // The objective the gradients follow: the loss plus the auxiliary losses.
    const auto objective = [&] {
      const PassResult p = md.forward_backward(batch, {});
      return p.loss + p.aux_loss;
    };
    Rng pick(5);
    for (const ParamView& v : md.views()) {
      std::vector<size_t> idx;
      for (int j = 0; j < 12; ++j) {
        if (v.kind == ParamKind::embedding) {
          const int token = tok.inputs[pick.below(static_cast<int>(tok.inputs.size()))];
          idx.push_back(v.offset + static_cast<size_t>(token) * c.d_model + pick.below(c.d_model));
        } else {
          idx.push_back(v.offset + pick.below(static_cast<int>(v.size)));
        }
      }
      const double worst = check_gradient(v.name, md.params(), g, objective, 1e-5, 1e-8, 1e-6, idx);
      INFO(v.name << ": largest |fd − analytic| = " << worst);
      CHECK(worst < 1e-7);
    }
    // No step above moved a token to another expert (the finite differences would be wrong).
    const PassResult after = md.forward_backward(batch, {});
    for (size_t i = 0; i < counts.size(); ++i) CHECK(after.moe[i].counts == counts[i]);
  }
}

TEST_CASE("MoE forward/backward is bit-for-bit deterministic, whatever the thread count", "[model][moe]") {
  ModelShape c = with_moe(model_explicit(2, 64, 2, 32, 128, 64), 4, 2, 64, 1);
  const Tokens tok = random_tokens(2 * 32, c.vocab_size, 4);
  const StepContext ctx{42, 9, 1};
  const int threads = omp_get_max_threads();
  for (const char* name : {"bf16", "e2m1", "nvfp4"}) {
    INFO(name);
    Model m(c, engine::recipe_preset(name), {});
    m.init_params(5);
    double first_loss = 0, first_aux = 0;
    std::vector<float> first_grads;
    for (int n : {threads, 1, 3}) {
      omp_set_num_threads(n);
      m.zero_grads();
      const PassResult r = m.forward_backward(tok.view(2, 32), ctx);
      REQUIRE_FALSE(r.nonfinite);
      int64_t assigned = 0;
      for (int64_t x : r.moe[0].counts) assigned += x;
      CHECK(assigned == 64 * 2);
      if (first_grads.empty()) {
        first_loss = r.loss;
        first_aux = r.aux_loss;
        first_grads = m.grads();
        continue;
      }
      CHECK(std::memcmp(&r.loss, &first_loss, sizeof r.loss) == 0);
      CHECK(std::memcmp(&r.aux_loss, &first_aux, sizeof r.aux_loss) == 0);
      CHECK(same_bits(m.grads(), first_grads));
    }
    omp_set_num_threads(threads);
  }
}
