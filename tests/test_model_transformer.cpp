// The whole model (engine/model/transformer): sizes and FLOPs, initialization, the gradient check
// of the full forward/backward, determinism, gradient accumulation, the probe hook, and the errors
// a bad configuration raises.
#include <cmath>
#include <cstring>
#include <map>
#include <set>
#include <stdexcept>
#include <string>
#include <vector>

#include <omp.h>

#include <catch2/catch.hpp>

#include "base/user_error.h"
#include "engine/model/model_shape.h"
#include "engine/model/transformer.h"
#include "engine/recipe.h"
#include "tests/test_model_helpers.h"
#include "tests/test_support.h"

using namespace fp4;
using namespace fp4::model;
using fp4test_model::check_gradient;
using fp4test_model::Rng;
using fp4::test::same_bits;

namespace {

struct Tokens {
  std::vector<int32_t> inputs, targets;
  int batch = 0, seq = 0;
  Batch view() const { return Batch{inputs.data(), targets.data(), batch, seq}; }
};

Tokens random_tokens(int batch, int seq, int vocab, uint64_t seed) {
  Rng rng(seed);
  Tokens t;
  t.batch = batch;
  t.seq = seq;
  std::vector<int32_t> stream(batch * (seq + 1));
  for (int32_t& s : stream) s = rng.below(vocab);
  for (int b = 0; b < batch; ++b)
    for (int i = 0; i < seq; ++i) {
      t.inputs.push_back(stream[b * (seq + 1) + i]);
      t.targets.push_back(stream[b * (seq + 1) + i + 1]);
    }
  return t;
}

// The message of what `f` throws: a UserError (a config the user wrote) or std::invalid_argument
// (the model's own checks of what it is handed).
std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const fp4::UserError& e) {
    return e.what();
  } catch (const std::invalid_argument& e) {
    return e.what();
  }
  return "(no exception)";
}

// The gradient-check model: 2 layers, d_model 32, 2 heads of 16, d_ff 64, vocabulary 17.
ModelShape tiny_config() { return model_explicit(2, 32, 2, 16, 64, 17); }

// Weights large enough that attention is far from uniform and every nonlinearity bends:
// matrices at 8× the initialization (std 0.16), norm gains uniform in [0.5, 1.5].
void grow_weights(Model& m) {
  Rng rng(99);
  for (const ParamView& v : m.views())
    for (int64_t i = 0; i < v.size; ++i) {
      float& p = m.params()[v.offset + i];
      p = v.kind == ParamKind::norm_gain ? static_cast<float>(rng.uniform(0.5, 1.5)) : 8.0f * p;
    }
}

}  // namespace

TEST_CASE("model sizes: d_ff rule, parameter counts and FLOPs by hand", "[model]") {
  CHECK(nearest_d_ff(128) == 320);   // 8/3·128 = 341.3: 320 is 21.3 away, 384 is 42.7
  CHECK(nearest_d_ff(256) == 704);   // 682.7: 640 is 42.7 away, 704 is 21.3
  CHECK(nearest_d_ff(384) == 1024);  // exactly 1024
  CHECK(nearest_d_ff(36) == 128);    // 96: a tie between 64 and 128 goes up
  CHECK(nearest_d_ff(12) == 64);     // 32: a tie between 0 and 64; never below 64 anyway
  CHECK(nearest_d_ff(30) == 64);     // 80

  const ModelShape d2 = model_preset("d2");
  CHECK(d2.n_layers == 2);
  CHECK(d2.d_model == 128);
  CHECK(d2.n_heads == 2);
  CHECK(d2.head_dim == 64);
  CHECK(d2.d_ff == 320);
  // Per block 4·128² + 3·128·320 + 2·128 = 65536 + 122880 + 256 = 188672.
  CHECK(block_params(d2) == 188672);
  // Non-embedding: 2·188672 + 128 (final norm) = 377472. Total: + 2·256·128 = 443008.
  CHECK(nonembedding_params(d2) == 377472);
  CHECK(total_params(d2) == 443008);
  // FLOPs/token at T = 256: 6·377472 + 6·2·256·128 = 2264832 + 393216 = 2658048.
  CHECK(train_flops_per_token(d2, 256) == 2658048.0);

  const ModelShape d4 = model_preset("d4");
  CHECK(d4.d_ff == 704);
  // Per block 4·256² + 3·256·704 + 2·256 = 262144 + 540672 + 512 = 803328.
  CHECK(block_params(d4) == 803328);
  CHECK(nonembedding_params(d4) == 3213568);  // 4·803328 + 256
  CHECK(total_params(d4) == 3344640);         // + 2·256·256
  // 6·3213568 + 6·4·256·256 = 19281408 + 1572864.
  CHECK(train_flops_per_token(d4, 256) == 20854272.0);

  // The rest of docs/model.md's table.
  struct Row {
    const char* preset;
    int64_t nonemb, total;
    double flops;
  };
  for (const Row& r : {Row{"d3", 1328448, 1426752, 8855424.0}, Row{"d5", 6045120, 6208960, 38728320.0},
                       Row{"d6", 10621824, 10818432, 67269888.0}}) {
    const ModelShape c = model_preset(r.preset);
    INFO(r.preset);
    CHECK(nonembedding_params(c) == r.nonemb);
    CHECK(total_params(c) == r.total);
    CHECK(train_flops_per_token(c, 256) == r.flops);
  }

  // The parameter buffer holds exactly that many values, in the documented order.
  const std::vector<ParamView> layout = param_layout(d2);
  CHECK(layout.back().offset + layout.back().size == total_params(d2));
  CHECK(layout.front().name == "tok_emb");
  CHECK(layout[2].name == "blocks.0.qkv");
  CHECK(layout[2].shape == std::vector<int64_t>{384, 128});
  CHECK(layout[2].linear_id == 0);
  CHECK(layout[6 + 6].name == "blocks.1.mlp_out");
  CHECK(layout[6 + 6].linear_id == 7);
  CHECK(layout.back().name == "lm_head");
  int64_t nonemb = 0;
  for (const ParamView& v : layout)
    if (v.kind != ParamKind::embedding && v.kind != ParamKind::lm_head) nonemb += v.size;
  CHECK(nonemb == nonembedding_params(d2));
}

TEST_CASE("model config errors are one line", "[model]") {
  const std::string heads = error_of([] { model_explicit(2, 100, 3, 0, 256); });
  CHECK(heads == "model: d_model = 100 is not divisible by n_heads = 3");
  const std::string odd = error_of([] { model_explicit(2, 30, 2, 15, 64); });
  CHECK(odd.find("head_dim = 15 must be even") != std::string::npos);
  const std::string mismatch = error_of([] { model_explicit(2, 64, 2, 16, 64); });
  CHECK(mismatch.find("must equal d_model = 64") != std::string::npos);
  CHECK(error_of([] { model_preset("x4"); }).find("is not d<L>") != std::string::npos);
  CHECK(error_of([] { model_preset("d0"); }).find("is not d<L>") != std::string::npos);
  for (const std::string& e : {heads, odd, mismatch}) CHECK(e.find('\n') == std::string::npos);
}

TEST_CASE("model rejects dimensions that do not fit the recipe's blocks", "[model]") {
  const engine::Recipe ufp4 = engine::recipe_preset("ufp4"), mxfp4 = engine::recipe_preset("mxfp4");
  // d_ff = 200 is MLP out's K: not a multiple of 16.
  const ModelShape ff200 = model_explicit(2, 64, 2, 32, 200);
  const std::string e1 = error_of([&] { Model m(ff200, ufp4, {}); });
  CHECK(e1.find("mlp_out (K = d_ff = 200") != std::string::npos);
  CHECK(e1.find("not a multiple of the block size 16") != std::string::npos);
  CHECK(e1.find('\n') == std::string::npos);
  // d_model = 48 fits 16 but not mxfp4's 32.
  const std::string e2 = error_of([&] { Model m(model_explicit(1, 48, 1, 48, 128), mxfp4, {}); });
  CHECK(e2.find("block size 32") != std::string::npos);
  // bf16 runs any shape, and so does a 4-bit recipe whose every block is kept in bf16.
  CHECK_NOTHROW(Model(ff200, engine::recipe_preset("bf16"), {}));
  CHECK_NOTHROW(Model(ff200, ufp4, {0, 1}));
  CHECK(error_of([&] { Model m(ff200, ufp4, {2}); }).find("bf16 layer 2 is out of range") != std::string::npos);

  // T is blocked only in wgrad: a micro-batch of 1·24 tokens can be evaluated, not trained.
  Model m(model_explicit(1, 64, 2, 32, 128), ufp4, {});
  m.init_params(1);
  const Tokens tok = random_tokens(1, 24, 256, 3);
  CHECK_NOTHROW(m.evaluate(tok.view()));
  const std::string e3 = error_of([&] { m.forward_backward(tok.view(), {}); });
  CHECK(e3.find("tokens per micro-batch (T) = 24 is not a multiple of the block size 16") != std::string::npos);
  // Token ids outside the vocabulary.
  Tokens bad = random_tokens(1, 32, 256, 3);
  bad.targets[5] = 256;
  CHECK(error_of([&] { m.evaluate(bad.view()); }) ==
        "model: target token 256 at [0, 5] is outside the vocabulary 0..255");
}

TEST_CASE("initialization: seeded, documented Box–Muller on Philox, GPT-2 scaling", "[model]") {
  const ModelShape c = model_preset("d2");
  Model a(c, engine::recipe_preset("bf16"), {}), b(c, engine::recipe_preset("bf16"), {});
  a.init_params(7);
  b.init_params(7);
  CHECK(same_bits(a.params(), b.params()));
  b.init_params(8);
  CHECK_FALSE(same_bits(a.params(), b.params()));

  // Element i of tensor `name`: Philox(counter = (i, i >> 32, FNV-1a(name), "INIT"), key = seed),
  // z = sqrt(−2 ln u1) cos(2π u2), value = fp32(std · z), as docs/model.md states.
  auto fnv = [](const std::string& s) {
    uint32_t h = 2166136261u;
    for (unsigned char ch : s) h = (h ^ ch) * 16777619u;
    return h;
  };
  const ParamView& v = a.view("blocks.1.mlp_out");
  for (uint64_t i : {0ull, 1ull, 12345ull}) {
    const Philox4 r = philox4x32_10(static_cast<uint32_t>(i), 0, fnv(v.name), 0x494E4954u, 7, 0);
    const double u1 = ((r.w[0] >> 8) + 1.0) / 16777216.0, u2 = (r.w[1] >> 8) / 16777216.0;
    const double z = std::sqrt(-2.0 * std::log(u1)) * std::cos(2.0 * 3.141592653589793 * u2);
    CHECK(a.params()[v.offset + i] == static_cast<float>(0.02 / 2.0 * z));  // 1/sqrt(2·2) = 1/2
  }

  // Statistics: matrices N(0, 0.02²), output projections 0.02/sqrt(2L), gains 1.
  for (const char* name : {"tok_emb", "blocks.0.qkv", "blocks.0.attn_out", "blocks.1.mlp_in", "lm_head"}) {
    const ParamView& p = a.view(name);
    double s = 0, s2 = 0;
    for (int64_t i = 0; i < p.size; ++i) {
      s += a.params()[p.offset + i];
      s2 += static_cast<double>(a.params()[p.offset + i]) * a.params()[p.offset + i];
    }
    const double expected = std::string(name).find("attn_out") != std::string::npos ? 0.01 : 0.02;
    INFO(name);
    CHECK(std::abs(s / p.size) < 0.05 * expected);
    CHECK(std::sqrt(s2 / p.size) == Approx(expected).epsilon(0.03));
  }
  const ParamView& g = a.view("final_norm");
  for (int64_t i = 0; i < g.size; ++i) CHECK(a.params()[g.offset + i] == 1.0f);
}

// The whole model, in two steps.
// 1. The double-precision model (the same code, linears multiplied in double) against central
//    differences of its own mean loss: h = 1e-5 on weights of size ~0.2 gives truncation and
//    cancellation errors ~1e-10 (measured: at most 1e-9) on gradients of size up to ~0.4;
//    tolerance 1e-8 + 1e-6·|g|.
// 2. The float model (bf16 recipe: the block linears take bf16 operands) against that verified
//    double gradient. Rounding X, W and dY to bf16 perturbs every product by up to 2⁻⁸ relative,
//    through ~20 rounded GEMM operands on the way to a weight's gradient, so the per-tensor error
//    ‖g_float − g_double‖ / ‖g_double‖ is expected near sqrt(20)·2⁻⁹/sqrt(3)·sqrt(2) ≈ 0.7%
//    (measured 0.3–1.1% with fp32 storage, 0.6–1.6% with bf16 storage, where every stored
//    activation and gradient is rounded too); tolerances 3e-2 and 5e-2. The loss agrees within
//    2e-3 relative. Mistakes specific to the float path (operand conversion, weight offsets,
//    gradient accumulation) are errors of order 1.
TEST_CASE("whole-model gradient check against finite differences in double", "[model][gradcheck]") {
  const ModelShape c = tiny_config();
  const engine::Recipe bf16 = engine::recipe_preset("bf16");
  Model mf(c, bf16, {}, Storage::fp32);
  mf.init_params(3);
  grow_weights(mf);
  BasicModel<double> md(c, bf16, {}, Storage::fp32);
  md.params().assign(mf.params().begin(), mf.params().end());

  const Tokens tok = random_tokens(2, 16, c.vocab_size, 11);
  const Batch batch = tok.view();
  const PassResult rd = md.forward_backward(batch, {});
  REQUIRE_FALSE(rd.nonfinite);
  const std::vector<double> gd = md.grads();

  // 1. Finite differences on 24 seeded elements of every tensor (embedding rows that occur).
  Rng pick(5);
  auto loss = [&] { return md.evaluate(batch).loss_sum / (batch.batch_size * batch.seq_len); };
  for (const ParamView& v : md.views()) {
    std::vector<size_t> idx;
    for (int j = 0; j < 24; ++j) {
      if (v.kind == ParamKind::embedding) {
        const int token = tok.inputs[pick.below(static_cast<int>(tok.inputs.size()))];
        idx.push_back(v.offset + static_cast<size_t>(token) * c.d_model + pick.below(c.d_model));
      } else {
        idx.push_back(v.offset + pick.below(static_cast<int>(v.size)));
      }
    }
    const double worst = check_gradient(v.name, md.params(), gd, loss, 1e-5, 1e-8, 1e-6, idx);
    INFO(v.name << ": largest |fd − analytic| = " << worst);
    CHECK(worst < 1e-7);
  }

  // 2. The float model, both storage modes.
  for (Storage storage : {Storage::fp32, Storage::bf16}) {
    Model m(c, bf16, {}, storage);
    m.params() = mf.params();
    const PassResult rf = m.forward_backward(batch, {});
    REQUIRE_FALSE(rf.nonfinite);
    CHECK(rf.loss == Approx(rd.loss).epsilon(2e-3));
    const double tol = storage == Storage::fp32 ? 3e-2 : 5e-2;
    for (const ParamView& v : m.views()) {
      double num = 0, den = 0;
      for (int64_t i = 0; i < v.size; ++i) {
        const double a = m.grads()[v.offset + i], b = gd[v.offset + i];
        num += (a - b) * (a - b);
        den += b * b;
      }
      INFO(storage_name(storage) << " storage, " << v.name << ": relative error " << std::sqrt(num / den));
      CHECK(std::sqrt(num / den) < tol);
    }
  }
}

TEST_CASE("forward/backward is bit-for-bit deterministic, whatever the thread count", "[model]") {
  const ModelShape c = model_explicit(2, 64, 2, 32, 128, 64);
  const Tokens tok = random_tokens(2, 32, c.vocab_size, 4);
  const StepContext ctx{42, 9, 1};
  const int threads = omp_get_max_threads();
  for (const char* name : {"bf16", "ufp4", "nvfp4"}) {
    for (Storage storage : {Storage::bf16, Storage::fp32}) {
      INFO(name << ", " << storage_name(storage) << " storage");
      Model m(c, engine::recipe_preset(name), {}, storage);
      m.init_params(5);
      double first_loss = 0;
      std::vector<float> first_grads;
      for (int n : {threads, threads, 1, 3}) {
        omp_set_num_threads(n);
        m.zero_grads();
        const PassResult r = m.forward_backward(tok.view(), ctx);
        REQUIRE_FALSE(r.nonfinite);
        if (first_grads.empty()) {
          first_loss = r.loss;
          first_grads = m.grads();
          continue;
        }
        CHECK(std::memcmp(&r.loss, &first_loss, sizeof r.loss) == 0);
        CHECK(same_bits(m.grads(), first_grads));
      }
      omp_set_num_threads(threads);
      // Evaluation gives the same loss as the training pass.
      const EvalResult e = m.evaluate(tok.view(), ctx);
      CHECK(e.tokens == 64);
      CHECK(e.loss_sum / 64 == first_loss);
    }
  }
}

TEST_CASE("stochastic rounding follows the step context", "[model]") {
  const ModelShape c = model_explicit(1, 64, 2, 32, 128, 64);
  const Tokens tok = random_tokens(2, 16, c.vocab_size, 4);
  Model m(c, engine::recipe_preset("ufp4"), {});
  m.init_params(5);
  auto grads_at = [&](StepContext ctx) {
    m.zero_grads();
    m.forward_backward(tok.view(), ctx);
    return m.grads();
  };
  const std::vector<float> base = grads_at({1, 2, 3});
  CHECK(same_bits(grads_at({1, 2, 3}), base));
  CHECK_FALSE(same_bits(grads_at({1, 2, 4}), base));  // micro-step
  CHECK_FALSE(same_bits(grads_at({1, 3, 3}), base));  // step
  CHECK_FALSE(same_bits(grads_at({2, 2, 3}), base));  // seed
  // The bf16 layers ignore it: with every block kept in bf16 the context changes nothing.
  Model kept(c, engine::recipe_preset("ufp4"), {0});
  kept.init_params(5);
  kept.forward_backward(tok.view(), {1, 2, 3});
  const std::vector<float> k1 = kept.grads();
  kept.zero_grads();
  kept.forward_backward(tok.view(), {9, 9, 9});
  CHECK(same_bits(kept.grads(), k1));
}

TEST_CASE("gradients accumulate across micro-steps, and uint16 tokens equal int32 tokens", "[model]") {
  const ModelShape c = model_explicit(2, 64, 2, 32, 128, 64);
  const Tokens tok = random_tokens(2, 16, c.vocab_size, 8);
  Model m(c, engine::recipe_preset("bf16"), {});
  m.init_params(2);
  const PassResult whole = m.forward_backward(tok.view(), {});
  const std::vector<float> once = m.grads();
  // Two passes at grad_scale 1/2 add up to one at 1: the halving is a power of two, exact through
  // every bf16 rounding, and x/2 + x/2 = x exactly.
  m.zero_grads();
  m.forward_backward(tok.view(), {}, 0.5f);
  const PassResult half = m.forward_backward(tok.view(), {}, 0.5f);
  CHECK(half.loss == whole.loss);
  CHECK(same_bits(m.grads(), once));

  std::vector<uint16_t> in16(tok.inputs.begin(), tok.inputs.end()), tg16(tok.targets.begin(), tok.targets.end());
  m.zero_grads();
  const PassResult r16 = m.forward_backward(Batch{in16.data(), tg16.data(), 2, 16}, {});
  CHECK(r16.loss == whole.loss);
  CHECK(same_bits(m.grads(), once));
}

TEST_CASE("a non-finite weight raises the non-finite flag", "[model]") {
  const ModelShape c = model_explicit(1, 64, 2, 32, 128, 64);
  const Tokens tok = random_tokens(2, 16, c.vocab_size, 8);
  for (const char* name : {"bf16", "ufp4"}) {
    Model m(c, engine::recipe_preset(name), {});
    m.init_params(2);
    CHECK_FALSE(m.forward_backward(tok.view(), {}).nonfinite);
    m.params()[m.view("blocks.0.mlp_in").offset + 17] = INFINITY;
    CHECK(m.forward_backward(tok.view(), {}).nonfinite);
    CHECK(m.evaluate(tok.view()).nonfinite);
  }
}

TEST_CASE("probe hook: every slot of every block linear, gradients untouched", "[model][probe]") {
  const ModelShape c = model_explicit(2, 64, 2, 32, 128, 64);
  const Tokens tok = random_tokens(2, 16, c.vocab_size, 8);
  Model m(c, engine::recipe_preset("ufp4"), {1});  // block 1 in bf16
  m.init_params(2);
  const StepContext ctx{3, 4, 0};
  const PassResult trained = m.forward_backward(tok.view(), ctx);
  const std::vector<float> grads = m.grads();

  std::map<std::pair<int, int>, std::pair<int, int>> shapes;  // (linear, slot) → (rows, cols)
  std::set<int> kept;
  double alpha_fprop_x0 = 0;
  const PassResult probed = m.probe(tok.view(), ctx, [&](const engine::LinearSite& site, engine::Slot slot,
                                                         const bf16_t* op, int rows, int cols) {
    shapes[{static_cast<int>(site.linear_id), static_cast<int>(slot)}] = {rows, cols};
    if (site.keep_bf16) kept.insert(static_cast<int>(site.linear_id));
    if (site.linear_id == 0 && slot == engine::Slot::fprop_x) {
      // What a caller does with it: the quantized copy and NUMERICS.md §8's alpha.
      const cpu::QuantizedTensor q = engine::quantize_slot(site, slot, op, rows, cols, true);
      double num = 0, den = 0;
      for (size_t i = 0; i < q.transformed.size(); ++i) {
        const double a = q.transformed[i], ah = bf16_to_float(q.dequant[i]) * q.tensor_scale;
        num += ah * a;
        den += a * a;
      }
      alpha_fprop_x0 = num / den;
    }
  });
  CHECK(shapes.size() == 2 * 4 * 6);
  CHECK(kept == std::set<int>{4, 5, 6, 7});
  const int R = 32, d = 64, f = 128;
  const int k[4] = {d, d, d, f}, n[4] = {3 * d, d, 2 * f, d};
  for (int id = 0; id < 8; ++id) {
    const int p = id % 4;
    CHECK(shapes[{id, 0}] == std::make_pair(R, k[p]));     // fprop_x
    CHECK(shapes[{id, 1}] == std::make_pair(n[p], k[p]));  // fprop_w
    CHECK(shapes[{id, 2}] == std::make_pair(R, n[p]));     // dgrad_dy
    CHECK(shapes[{id, 3}] == std::make_pair(n[p], k[p]));  // dgrad_w
    CHECK(shapes[{id, 4}] == std::make_pair(R, n[p]));     // wgrad_dy
    CHECK(shapes[{id, 5}] == std::make_pair(R, k[p]));     // wgrad_x
  }
  CHECK(alpha_fprop_x0 > 0.9);
  CHECK(alpha_fprop_x0 < 1.1);
  CHECK(probed.loss == trained.loss);
  CHECK(same_bits(m.grads(), grads));
}
