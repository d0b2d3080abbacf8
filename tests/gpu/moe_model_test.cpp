// moe_model_test.cpp — [gpu] the CUDA model's MoE blocks (engine/cuda_model/cuda_model_moe.cpp)
// against the CPU reference model (engine/model/moe_block.cpp): one micro-batch's loss, auxiliary
// losses, expert loads and gradients under bf16 and 4-bit recipes, within the tolerances of the
// dense model's test (engine_test.cpp explains them); one expert at the dense width, top-1, against
// the dense CUDA model; determinism; and `fp4lab train` of an MoE preset on device cuda against
// the same run on the CPU.
//
// The routing itself can differ between the backends only where two logits lie within a few fp32
// ulp of each other (the router GEMM sums in another order). With these seeded weights the gaps
// between a token's logits are of order 1e-2 against differences of order 1e-7, so a flip is
// improbable and the tests require the same expert loads; a failure of that check alone, with the
// losses within tolerance, would point at such a tie rather than at a wrong expert path.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "engine/cuda_model/cuda_model.h"
#include "engine/model/transformer.h"
#include "engine/recipe.h"
#include "engine/run/trainer.h"
#include "tests/gpu/grad_compare.h"
#include "tests/gpu/model_pair.h"
#include "tests/run_test_helpers.h"
#include "tests/test_support.h"  // EnvSetting, same_bits

using fp4::test::read_rows;
using fp4::test::rel_diff_norm;
using fp4::test::same_bits;
using nlohmann::json;

namespace {

using fp4::model::ModelShape;
using fp4::model::ParamView;

ModelShape with_moe(ModelShape c, int experts, int top_k, int d_ff_expert, int shared, int every) {
  c.moe.n_experts = experts;
  c.moe.top_k = top_k;
  c.moe.d_ff_expert = d_ff_expert;
  c.moe.n_shared = shared;
  c.moe.every = every;
  c.moe.renormalize = top_k > 1;
  c.moe.balance_coef = fp4::model::kDefaultBalanceCoef;
  c.moe.z_coef = fp4::model::kDefaultZCoef;
  return c;
}

struct Tokens {
  std::vector<int32_t> inputs, targets;
  fp4::model::Batch batch(int b, int t) const { return fp4::model::Batch{inputs.data(), targets.data(), b, t}; }
};

Tokens tokens(int n, int vocab) {
  Tokens t;
  for (int i = 0; i < n; ++i) {
    t.inputs.push_back((i * 37 + 5) % vocab);
    t.targets.push_back((i * 11 + 3) % vocab);
  }
  return t;
}

// The dense tolerances (engine_test.cpp's one-micro-batch test): loss 1e-4 relative; gradients by
// norm 5e-3 (bf16) or 2e-2 (4-bit), each tensor 10x looser.
double grad_tolerance(const fp4::engine::Recipe& r) { return r.quantized ? 2e-2 : 5e-3; }

struct GradCompare {
  double whole = 0.0, worst = 0.0;
  std::string worst_name;
};

GradCompare compare_grads(const std::vector<float>& got, const std::vector<float>& want,
                          const std::vector<ParamView>& views) {
  GradCompare c;
  c.whole = rel_diff_norm(got, want, 0, want.size());
  for (const ParamView& v : views) {
    const double r = rel_diff_norm(got, want, static_cast<size_t>(v.offset), static_cast<size_t>(v.size));
    if (r > c.worst) {
      c.worst = r;
      c.worst_name = v.name;
    }
  }
  return c;
}

// The dense model's name of a one-expert model's tensor: expert 0's linears are the dense MLP's.
std::string dense_name(std::string name) {
  const size_t at = name.find(".experts.0.");
  if (at != std::string::npos) name = name.substr(0, at) + "." + name.substr(at + 11);
  return name;
}

}  // namespace

TEST_CASE("cuda MoE model one micro-batch matches the CPU MoE model", "[gpu][engine][moe]") {
  const std::string recipe_name = GENERATE(as<std::string>{}, "bf16", "e2m1", "ufp4", "nvfp4", "mxfp4");
  // Every block an MoE block (E4, top-2); and every other one with a shared expert (the dense
  // block 0 beside MoE block 1). Experts at width 96 (a multiple of every recipe's block).
  const int every = GENERATE(1, 2);
  INFO("recipe " << recipe_name << ", moe.every " << every);
  const ModelShape dense = fp4::model::model_explicit(2, 64, 1, 64, 192, 64);
  const ModelShape mc = with_moe(dense, 4, 2, 96, every == 2 ? 1 : 0, every);
  const fp4::test::ModelPair models = fp4::test::model_pair(mc, fp4::engine::recipe_preset(recipe_name), 11);
  const fp4::engine::Recipe& recipe = models.recipe;
  const std::vector<int>& bf16_layers = models.bf16_layers;
  fp4::model::Model& cpu = *models.cpu;
  fp4::cuda_model::CudaModel& gpu = *models.gpu;

  const int B = 2, T = 32;
  const Tokens tok = tokens(B * T, 64);
  const fp4::model::StepContext ctx{5, 3, 1};
  // Two accumulating passes, as a step with two micro-steps does.
  cpu.zero_grads();
  gpu.zero_grads();
  fp4::model::PassResult rc, rg;
  for (int pass = 0; pass < 2; ++pass) {
    rc = cpu.forward_backward(tok.batch(B, T), ctx, 0.5f);
    rg = gpu.forward_backward(tok.batch(B, T), ctx, 0.5f);
    REQUIRE_FALSE(rc.nonfinite);
    REQUIRE_FALSE(rg.nonfinite);
  }
  // The routing: the same expert loads, the auxiliary losses within fp32 rounding of expf.
  REQUIRE(rg.moe.size() == rc.moe.size());
  REQUIRE(rc.moe.size() == (every == 1 ? 2u : 1u));
  for (size_t i = 0; i < rc.moe.size(); ++i) {
    CHECK(rg.moe[i].block == rc.moe[i].block);
    CHECK(rg.moe[i].counts == rc.moe[i].counts);
    CHECK(std::abs(rg.moe[i].balance - rc.moe[i].balance) <= 1e-5 * rc.moe[i].balance);
    CHECK(std::abs(rg.moe[i].z - rc.moe[i].z) <= 1e-4 * rc.moe[i].z);
  }
  CHECK(std::abs(rg.aux_loss - rc.aux_loss) <= 1e-4 * rc.aux_loss);

  const double loss_rel = std::abs(rg.loss - rc.loss) / rc.loss;
  const std::vector<float> gg = gpu.grads_to_host();
  const GradCompare g = compare_grads(gg, cpu.grads(), cpu.views());
  const auto ec = cpu.evaluate(tok.batch(B, T), ctx);
  const auto eg = gpu.evaluate(tok.batch(B, T), ctx);
  const double eval_rel = std::abs(eg.loss_sum - ec.loss_sum) / ec.loss_sum;
  std::printf("MoE one micro-batch %-5s every %d: loss cpu %.7f gpu %.7f (rel %.2e); eval rel %.2e; grads rel-norm "
              "%.2e, worst tensor %s %.2e\n",
              recipe_name.c_str(), every, rc.loss, rg.loss, loss_rel, eval_rel, g.whole, g.worst_name.c_str(),
              g.worst);
  CHECK(loss_rel < 1e-4);
  CHECK(eval_rel < 1e-4);
  CHECK(g.whole < grad_tolerance(recipe));
  CHECK(g.worst < 10 * grad_tolerance(recipe));
  // The router's gradient is not zero (the gates and the auxiliary losses reach it).
  for (const ParamView& v : cpu.views()) {
    if (v.kind != fp4::model::ParamKind::router) continue;
    double norm = 0.0;
    for (int64_t i = 0; i < v.size; ++i) norm += std::abs(gg[static_cast<size_t>(v.offset + i)]);
    CHECK(norm > 0.0);
  }

  // Deterministic: a second model from the same weights gives the same bits.
  fp4::cuda_model::CudaModel again(mc, recipe, bf16_layers);
  again.init_params(11);
  again.zero_grads();
  fp4::model::PassResult ra;
  for (int pass = 0; pass < 2; ++pass) ra = again.forward_backward(tok.batch(B, T), ctx, 0.5f);
  CHECK(ra.loss == rg.loss);
  CHECK(same_bits(again.grads_to_host(), gg));
}

TEST_CASE("cuda MoE model with one expert at the dense width, top-1, is the dense CUDA model", "[gpu][engine][moe]") {
  const std::string recipe_name = GENERATE(as<std::string>{}, "bf16", "e2m1", "ufp4", "nvfp4");
  INFO("recipe " << recipe_name);
  const ModelShape dense = fp4::model::model_explicit(2, 64, 1, 64, 192, 64);
  ModelShape one = with_moe(dense, 1, 1, 192, 0, 1);
  one.moe.z_coef = 0.0;  // the z-loss would move the router, and through it the inputs' gradients
  const fp4::engine::Recipe recipe = fp4::engine::recipe_preset(recipe_name);
  const std::vector<int> bf16_layers = fp4::engine::resolve_bf16_layers(recipe.bf16_layers, dense.n_layers);
  // The dense weights, and the MoE model's: expert 0 of each block holds the dense MLP's weights
  // (initialization keys by name, so they are copied), the router its own.
  fp4::model::Model host_dense(dense, recipe, bf16_layers), host_moe(one, recipe, bf16_layers);
  host_dense.init_params(7);
  host_moe.init_params(8);
  std::vector<float> moe_params = host_moe.params();
  for (const ParamView& v : host_moe.views()) {
    if (v.kind == fp4::model::ParamKind::router) continue;
    const ParamView& dv = host_dense.view(dense_name(v.name));
    REQUIRE(dv.size == v.size);
    std::copy_n(host_dense.params().begin() + dv.offset, dv.size, moe_params.begin() + v.offset);
  }
  fp4::cuda_model::CudaModel gd(dense, recipe, bf16_layers), gm(one, recipe, bf16_layers);
  gd.params_from_host(host_dense.params());
  gm.params_from_host(moe_params);

  const int B = 2, T = 32;
  const Tokens tok = tokens(B * T, 64);
  const fp4::model::StepContext ctx{42, 9, 1};
  gd.zero_grads();
  gm.zero_grads();
  const fp4::model::PassResult rd = gd.forward_backward(tok.batch(B, T), ctx);
  const fp4::model::PassResult rm = gm.forward_backward(tok.batch(B, T), ctx);
  REQUIRE_FALSE(rd.nonfinite);
  REQUIRE_FALSE(rm.nonfinite);
  REQUIRE(rm.moe.size() == 2);
  CHECK(rm.moe[0].counts == std::vector<int64_t>{B * T});
  CHECK(rm.moe[0].balance == 1.0);
  const double loss_rel = std::abs(rm.loss - rd.loss) / rd.loss;
  // The MoE model's gradients, in the dense layout (the router's left out: exactly zero).
  const std::vector<float> gmh = gm.grads_to_host(), gdh = gd.grads_to_host();
  std::vector<float> mapped(gdh.size(), 0.0f);
  double router_abs = 0.0;
  for (const ParamView& v : host_moe.views()) {
    if (v.kind == fp4::model::ParamKind::router) {
      for (int64_t i = 0; i < v.size; ++i) router_abs += std::abs(gmh[static_cast<size_t>(v.offset + i)]);
      continue;
    }
    const ParamView& dv = host_dense.view(dense_name(v.name));
    std::copy_n(gmh.begin() + v.offset, v.size, mapped.begin() + dv.offset);
  }
  const GradCompare g = compare_grads(mapped, gdh, host_dense.views());
  std::printf("MoE E=1 k=1 vs dense on the GPU %-5s: loss rel %.2e (bits %s), grads rel-norm %.2e (bits %s), worst "
              "tensor %s %.2e\n",
              recipe_name.c_str(), loss_rel, rm.loss == rd.loss ? "equal" : "differ", g.whole,
              same_bits(mapped, gdh) ? "equal" : "differ", g.worst_name.c_str(), g.worst);
  CHECK(router_abs == 0.0);
  CHECK(loss_rel < 1e-4);
  CHECK(g.whole < grad_tolerance(recipe));
  CHECK(g.worst < 10 * grad_tolerance(recipe));
}

TEST_CASE("cuda MoE model's GEMM shapes stay few while its routing changes (bf16 groups padded)", "[gpu][engine][moe]") {
  // Eight routed experts, top-2, over R = 256 rows: 512 assignments whose split over the experts
  // changes with the tokens. bf16's groups are padded to CudaModel::kBf16GroupRows, so a weight
  // gradient's rows take one of 512 / 64 = 8 values and its two expert shapes at most 16 plans in
  // each cuBLASLt wrapper that runs them (the model's, or each of its side streams'), however many
  // passes run; unpadded, about every pass would add new ones.
  const ModelShape mc = with_moe(fp4::model::model_explicit(2, 64, 1, 64, 192, 64), 8, 2, 96, 0, 1);
  fp4::cuda_model::CudaModel gpu(mc, fp4::engine::recipe_preset("bf16"), {});
  gpu.init_params(3);
  const int B = 4, T = 64;
  auto pass = [&](int p) {
    // A different multiset of tokens in every pass (an LCG per pass): the routing follows mostly
    // the tokens' identities at this initialisation, so a mere permutation would keep the loads.
    Tokens t;
    uint32_t state = 2654435761u * static_cast<uint32_t>(p + 1);
    for (int i = 0; i < B * T; ++i) {
      state = state * 1664525u + 1013904223u;
      t.inputs.push_back(static_cast<int32_t>((state >> 24) % 64));
      t.targets.push_back((i * 11 + p) % 64);
    }
    return gpu.forward_backward(t.batch(B, T), fp4::model::StepContext{static_cast<uint64_t>(p), 0, 1});
  };
  gpu.zero_grads();
  const fp4::model::PassResult first = pass(0);
  REQUIRE_FALSE(first.nonfinite);
  const size_t plans_first = gpu.gemm_plans();
  std::vector<std::vector<int64_t>> loads;
  for (int p = 1; p <= 12; ++p) {
    const fp4::model::PassResult r = pass(p);
    REQUIRE_FALSE(r.nonfinite);
    REQUIRE(r.moe.size() == 2);
    loads.push_back(r.moe[0].counts);
  }
  // The routing did change (otherwise the test shows nothing).
  std::sort(loads.begin(), loads.end());
  const size_t distinct_loads = static_cast<size_t>(std::unique(loads.begin(), loads.end()) - loads.begin());
  const size_t added = gpu.gemm_plans() - plans_first;
  std::printf("MoE bf16 GEMM plans: %zu after the first pass, %zu added over 12 more (%zu distinct expert loads)\n",
              plans_first, added, distinct_loads);
  CHECK(distinct_loads >= 6);
  CHECK(added <= static_cast<size_t>(16 * std::max(1, gpu.expert_wgrad_streams())));
}

namespace {

// Three forward-backward passes (no optimizer step) of a two-block model with eight experts of
// which each token takes two, under `recipe_name`, with the environment variable `env` set to
// `value` (null: unset): the losses, the accumulated gradients and the side streams it used.
struct ThreePasses {
  std::vector<double> losses;
  std::vector<float> grads;
  int wgrad_streams = -1;
};

ThreePasses three_moe_passes(const std::string& recipe_name, const char* env, const char* value) {
  const fp4::test::EnvSetting setting(env, value);
  const ModelShape mc = with_moe(fp4::model::model_explicit(2, 64, 1, 64, 192, 64), 8, 2, 96, 0, 1);
  const int B = 4, T = 64;
  const Tokens tok = tokens(B * T, 64);
  fp4::cuda_model::CudaModel gpu(mc, fp4::engine::recipe_preset(recipe_name), {});
  gpu.init_params(7);
  gpu.zero_grads();
  ThreePasses out;
  for (int pass = 0; pass < 3; ++pass) {
    const fp4::model::PassResult r =
        gpu.forward_backward(tok.batch(B, T), fp4::model::StepContext{2, 3, static_cast<uint32_t>(pass)}, 0.5f);
    REQUIRE_FALSE(r.nonfinite);
    out.losses.push_back(r.loss);
  }
  out.grads = gpu.grads_to_host();
  out.wgrad_streams = gpu.expert_wgrad_streams();
  return out;
}

}  // namespace

TEST_CASE("cuda MoE experts' weight gradients on side streams give the bits of one stream", "[gpu][engine][moe]") {
  // bf16, and ufp4, whose copies of all expert groups are made in one call each (the side streams'
  // 4-bit case); eight experts over three side streams, so a stream runs several experts' GEMMs.
  const std::string recipe_name = GENERATE(as<std::string>{}, "bf16", "ufp4");
  INFO("recipe " << recipe_name);
  const ThreePasses one = three_moe_passes(recipe_name, "FP4LAB_MOE_WGRAD_STREAMS", "1");
  const ThreePasses three = three_moe_passes(recipe_name, "FP4LAB_MOE_WGRAD_STREAMS", "3");
  CHECK(one.wgrad_streams == 0);
  CHECK(three.wgrad_streams == 3);
  CHECK(three.losses == one.losses);
  CHECK(same_bits(three.grads, one.grads));
}

TEST_CASE("cuda MoE experts' weight gradients in one grouped call (the opt-in) repeat and match the per-expert calls",
          "[gpu][engine][moe]") {
  // FP4LAB_MOE_GROUPED_WGRAD=1 sums each expert's gradient in another kernel: not the default's
  // bits, but the same products to fp32 rounding, and the same bits from run to run. The forward
  // and every other gradient do not involve it: the losses stay equal.
  const std::string recipe_name = GENERATE(as<std::string>{}, "bf16", "ufp4");
  INFO("recipe " << recipe_name);
  const ThreePasses each = three_moe_passes(recipe_name, "FP4LAB_MOE_GROUPED_WGRAD", nullptr);
  const ThreePasses grouped = three_moe_passes(recipe_name, "FP4LAB_MOE_GROUPED_WGRAD", "1");
  const ThreePasses again = three_moe_passes(recipe_name, "FP4LAB_MOE_GROUPED_WGRAD", "1");
  CHECK(grouped.losses == each.losses);
  CHECK(again.losses == grouped.losses);
  CHECK(same_bits(again.grads, grouped.grads));
  REQUIRE(grouped.grads.size() == each.grads.size());
  double scale = 0.0, worst = 0.0;
  for (size_t i = 0; i < each.grads.size(); ++i) {
    scale = std::max(scale, std::fabs(static_cast<double>(each.grads[i])));
    worst = std::max(worst, std::fabs(static_cast<double>(grouped.grads[i]) - each.grads[i]));
  }
  std::printf("MoE grouped weight gradients (%s): worst difference %.3g of the largest gradient %.3g\n",
              recipe_name.c_str(), worst, scale);
  CHECK(scale > 0.0);
  CHECK(worst <= 1e-5 * scale);
}

TEST_CASE("cuda trains an MoE preset like the CPU does, routing rows included, deterministically and resumably",
          "[gpu][engine][moe][resume]") {
  const std::string recipe_name = GENERATE(as<std::string>{}, "bf16", "e2m1", "ufp4");
  INFO("recipe " << recipe_name);
  const fp4::test::ScratchDir scratch;
  const std::filesystem::path& tmp = scratch.path();
  const json config = {{"model", {{"preset", "d1-e4k2"}, {"seq_len", 32}}},
                       {"recipe", recipe_name},
                       {"data", "synthetic:markov?order=1&vocab=64&branch=4&seed=1"},
                       {"train", {{"steps", 20}, {"batch_tokens", 256}, {"micro_batch", 2}, {"lr", 3e-3}, {"seed", 3}}},
                       {"eval", {{"every", 10}, {"tokens", 512}}},
                       {"probe", {{"every", 0}}},
                       {"checkpoint", {{"every", 10}}}};
  const auto path = tmp / "config.json";
  std::ofstream(path) << config.dump(2);
  auto train = [&](const std::string& device, const std::string& dir, bool resume = false, int64_t stop_after = -1) {
    fp4::run::TrainOptions o;
    o.config = path;
    o.dir = tmp / dir;
    o.echo = false;
    o.device = device;
    o.resume = resume;
    o.stop_after = stop_after;
    return fp4::run::train(o);
  };
  REQUIRE(train("cpu", "cpu").outcome == fp4::run::Outcome::succeeded);
  REQUIRE(train("cuda", "cuda").outcome == fp4::run::Outcome::succeeded);
  // Deterministic (a second run) and resumable bit for bit (10 steps, then the other 10).
  REQUIRE(train("cuda", "again").outcome == fp4::run::Outcome::succeeded);
  fp4::test::require_identical_runs(tmp / "cuda", tmp / "again");
  CHECK(train("cuda", "split", false, 10).outcome == fp4::run::Outcome::interrupted);
  REQUIRE(train("cuda", "split", true).outcome == fp4::run::Outcome::succeeded);
  fp4::test::require_identical_runs(tmp / "cuda", tmp / "split");
  const std::vector<json> cpu_rows = read_rows(tmp / "cpu"), gpu_rows = read_rows(tmp / "cuda");
  auto of = [](const std::vector<json>& rows, const std::string& kind) {
    std::vector<json> out;
    for (const json& r : rows)
      if (r["kind"] == kind) out.push_back(r);
    return out;
  };
  const std::vector<json> tc = of(cpu_rows, "train"), tg = of(gpu_rows, "train");
  const std::vector<json> mc = of(cpu_rows, "moe"), mg = of(gpu_rows, "moe");
  REQUIRE(tc.size() == 20);
  REQUIRE(tg.size() == tc.size());
  REQUIRE(mc.size() == 20);
  REQUIRE(mg.size() == mc.size());
  // The loss curves within the dense curves' per-step tolerance (engine_test.cpp: 2.5%), the
  // routing rows with the same keys and their loads near the CPU's.
  for (size_t i = 0; i < tc.size(); ++i) {
    INFO("step " << i);
    const double a = tc[i]["loss"].get<double>(), b = tg[i]["loss"].get<double>();
    CHECK(std::abs(b - a) <= 0.025 * a);
    CHECK(tg[i].contains("aux_loss"));
  }
  for (size_t i = 0; i < mc.size(); ++i) {
    INFO("moe row " << i);
    for (const auto& [key, value] : mc[i].items()) CHECK(mg[i].contains(key));
    CHECK(mg[i]["layer"] == mc[i]["layer"]);
    CHECK(std::abs(mg[i]["balance"].get<double>() - mc[i]["balance"].get<double>()) <= 0.05);
  }
}
