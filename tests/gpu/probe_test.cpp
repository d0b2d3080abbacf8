// probe_test.cpp — the CUDA backend's shrinkage probe (CudaModel::probe, TrainBackend::probe,
// kernels/cuda/quant_metrics.cuh):
//   - the metrics kernel against its CPU reference cpu::slot_metric_sums, run to run bit for bit;
//   - in a model's probe pass, every slot's copy bit for bit the CPU's quantize_slot of the same
//     source, and its metrics those of cpu::quant_metrics within docs/probe.md's tolerance;
//   - the probe's rows against the CPU backend's on the same weights and batch;
//   - the probe changes no training state: a run with probes equals one without, bit for bit.
//
// The tolerance (docs/probe.md, "On the GPU"): the same copies give the same integers (count,
// nonfinite, the code histogram, so b_eff to the bit), and fp64 sums that differ only in the order
// of their additions: alpha and nmse within 1e-10 relative, shrink within 1e-10 (it is a difference
// of two sums, relative to Σ|A|), sqnr_db within 1e-9 dB.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "engine/cuda_model/cuda_backend.h"
#include "engine/cuda_model/cuda_model.h"
#include "engine/model/transformer.h"
#include "engine/quantized_linear.h"
#include "engine/recipe.h"
#include "engine/run/backend.h"
#include "engine/run/trainer.h"
#include "kernels/cpu/quant_metrics.h"
#include "kernels/cpu/quantize.h"
#include "kernels/cuda/cuda_common.cuh"
#include "kernels/cuda/quant_metrics.cuh"
#include "tests/gpu/model_pair.h"
#include "tests/run_test_helpers.h"

using fp4::bf16_t;
using fp4::cpu::QuantMetrics;
using fp4::engine::Slot;
using fp4::cuda::DeviceArray;
using nlohmann::json;

namespace {

// ---- Tolerances ----

constexpr double kRelTol = 1e-10;     // alpha, nmse
constexpr double kShrinkTol = 1e-10;  // shrink (absolute)
constexpr double kSqnrTol = 1e-9;     // sqnr_db (absolute, dB)

double rel(double got, double want) { return std::abs(got - want) / std::max(std::abs(want), 1e-300); }

// NaN equals NaN here: a metric undefined on one side must be undefined on the other.
bool same_value(double a, double b) { return (std::isnan(a) && std::isnan(b)) || a == b; }

void check_tight(const QuantMetrics& got, const QuantMetrics& want) {
  CHECK(rel(got.alpha, want.alpha) <= kRelTol);
  CHECK(rel(got.nmse, want.nmse) <= kRelTol);
  CHECK(std::abs(got.shrink - want.shrink) <= kShrinkTol);
  CHECK(std::abs(got.sqnr_db - want.sqnr_db) <= kSqnrTol);
  CHECK(same_value(got.b_eff, want.b_eff));  // the same histogram through the same host formula
  CHECK(got.count == want.count);
  CHECK(got.nonfinite == want.nonfinite);
}

template <class T>
std::vector<T> download(const T* p, size_t n, cudaStream_t stream) {
  std::vector<T> h(n);
  FP4_CUDA_CHECK(cudaMemcpyAsync(h.data(), p, n * sizeof(T), cudaMemcpyDeviceToHost, stream));
  FP4_CUDA_CHECK(cudaStreamSynchronize(stream));
  return h;
}

std::vector<bf16_t> wavy_tensor(int rows, int cols) {
  std::vector<bf16_t> x(static_cast<size_t>(rows) * cols);
  for (size_t i = 0; i < x.size(); ++i) {
    const double s = std::sin(0.7 * static_cast<double>(i)), t = std::cos(0.013 * static_cast<double>(i));
    x[i] = fp4::float_to_bf16(static_cast<float>(s * s * s * (1.0 + 4.0 * t * t) + 0.01 * t));
  }
  return x;
}

// ---- A small model, as tests/gpu/engine_test.cpp's one micro-batch ----

struct SmallBatch {
  static constexpr int T = 32;
  int B;
  std::vector<int32_t> inputs, targets;
  explicit SmallBatch(int sequences = 2) : B(sequences), inputs(B * T), targets(B * T) {
    for (int i = 0; i < B * T; ++i) {
      inputs[i] = (i * 37 + 5) % 64;
      targets[i] = (i * 11 + 3) % 64;
    }
  }
  fp4::model::Batch view() const {
    fp4::model::Batch b;
    b.inputs = inputs.data();
    b.targets = targets.data();
    b.batch_size = B;
    b.seq_len = T;
    return b;
  }
};

// Two blocks, d_model 64, d_ff 192, vocabulary 64: every dimension fits the 16- and 32-wide blocks.
fp4::model::ModelShape small_model() { return fp4::model::model_explicit(2, 64, 1, 64, 192, 64); }

// Quartet II's 128-wide rotation and TetraJet-v2's 128-wide outer blocks run along every GEMM's
// dimensions, the tokens of the weight gradient included (docs/recipes.md): their recipes get a
// model (d_model 128, d_ff 384) and a batch (4 sequences, 128 tokens) whose every dimension is a
// multiple of 128.
bool needs_multiples_of_128(const fp4::engine::Recipe& r) {
  for (int i = 0; i < fp4::engine::kSlotCount; ++i) {
    const fp4::QuantSpec q = fp4::engine::slot_quant_spec(r.slots[i], static_cast<Slot>(i));
    if (fp4::cpu::axis_multiple(q) == 128) return true;
  }
  return false;
}
fp4::model::ModelShape model_for(const fp4::engine::Recipe& r) {
  return needs_multiples_of_128(r) ? fp4::model::model_explicit(2, 128, 2, 64, 384, 64) : small_model();
}
SmallBatch batch_for(const fp4::engine::Recipe& r) { return SmallBatch(needs_multiples_of_128(r) ? 4 : 2); }

// A non-preset recipe that exercises what the presets leave out: per-step RHT signs on every
// GEMM, stochastic rounding on every slot, and the last block kept in bf16 (not probed).
fp4::engine::Recipe variant_recipe() {
  fp4::engine::Recipe r = fp4::engine::recipe_preset("ufp4");
  r.name = "ufp4-per-step-sr-last-bf16";
  for (fp4::engine::SlotRecipe& s : r.slots) {
    s.rht_signs = fp4::RhtSigns::per_step;
    s.sr = true;
  }
  r.bf16_layers = {"last:1"};
  return r;
}

fp4::engine::Recipe recipe_named(const std::string& name) {
  return name == "variant" ? variant_recipe() : fp4::engine::recipe_preset(name);
}

bool is_weight_slot(Slot s) { return s == Slot::fprop_w || s == Slot::dgrad_w; }

// ---- Whole runs ----

fp4::run::TrainResult train_run(const std::filesystem::path& config, const std::filesystem::path& dir) {
  fp4::run::TrainOptions o = fp4::test::quiet_train_options(config, dir);
  o.device = "cuda";
  return fp4::run::train(o);
}

std::vector<json> without_probe_rows(std::vector<json> rows) {
  std::erase_if(rows, [](const json& r) { return r["kind"] == "probe" || r["kind"] == "probe_gemm"; });
  return rows;
}

}  // namespace

TEST_CASE("gpu slot metrics kernel matches cpu slot_metric_sums and repeats bit for bit", "[gpu][probe]") {
  // A small shape (one CTA) and one of 8M elements (1024 CTAs, each thread two 16-vectors: the
  // grid-stride loop and the partials' reduction both run), with a NaN and an infinity.
  const auto [rows, cols] = GENERATE(std::make_pair(64, 96), std::make_pair(2048, 4096));
  std::vector<bf16_t> x = wavy_tensor(rows, cols);
  x[7] = fp4::float_to_bf16(std::nanf(""));
  x[static_cast<size_t>(33) * cols + 70] = fp4::float_to_bf16(INFINITY);
  DeviceArray<bf16_t> dx(x);
  // Row and column blocking, with and without the RHT, one- and two-level scales, 2D tiles, e8m0.
  std::vector<fp4::QuantSpec> specs(5);
  specs[0].rht = true;                                   // row, fp32, e2m1, RHT
  specs[1].along = fp4::BlockAlong::column;              // column, e4m3x2, e1m2, RHT, SR
  specs[1].scale = fp4::ScaleMode::e4m3x2;
  specs[1].grid = fp4::Grid::e1m2;
  specs[1].gmax = 7.0f;
  specs[1].rht = true;
  specs[1].rounding = fp4::Rounding::sr;
  specs[1].seed = 3;
  specs[1].stream = 77;
  specs[2].tile_2d = true;                               // 16×16 tiles, e4m3x2, no RHT
  specs[2].scale = fp4::ScaleMode::e4m3x2;
  specs[3].scale = fp4::ScaleMode::e8m0;                 // mxfp4's 32-blocks
  specs[3].block = 32;
  specs[4].along = fp4::BlockAlong::column;              // column, fp32, no RHT
  fp4::cuda::Workspace ws;
  for (const fp4::QuantSpec& spec : specs) {
    INFO(rows << "x" << cols << " along " << (spec.along == fp4::BlockAlong::row ? "rows" : "columns")
              << (spec.rht ? " rht" : "") << (spec.tile_2d ? " 2D" : "") << " scale " << static_cast<int>(spec.scale));
    const fp4::cpu::QuantizedTensor q = fp4::cpu::quantize(x.data(), rows, cols, spec);
    DeviceArray<bf16_t> dq(q.dequant);
    DeviceArray<uint8_t> dc(q.codes);
    DeviceArray<float> dts(std::vector<float>{q.tensor_scale});
    DeviceArray<fp4::cuda::DeviceMetricSums> out(2);
    for (int k = 0; k < 2; ++k)
      fp4::cuda::slot_metric_sums(dx.get(), rows, cols, spec, dq.get(), dc.get(), dts.get(), out.get() + k, ws, nullptr);
    const std::vector<fp4::cuda::DeviceMetricSums> got = out.download();
    CHECK(std::memcmp(&got[0], &got[1], sizeof(got[0])) == 0);  // deterministic
    const fp4::cpu::QuantMetricsSums g = fp4::cuda::host_sums(got[0]);
    const fp4::cpu::QuantMetricsSums want =
        fp4::cpu::slot_metric_sums(x.data(), rows, cols, spec, q.dequant.data(), q.codes.data(), q.tensor_scale);
    CHECK(g.count == want.count);
    CHECK(g.coded == want.coded);
    CHECK(g.nonfinite == want.nonfinite);
    CHECK(g.nonfinite > 0);
    CHECK(g.histogram == want.histogram);
    const std::pair<double, double> sums[] = {{g.sum_aa, want.sum_aa},
                                              {g.sum_ha, want.sum_ha},
                                              {g.sum_err2, want.sum_err2},
                                              {g.sum_abs_a, want.sum_abs_a},
                                              {g.sum_abs_h, want.sum_abs_h}};
    for (const auto& [got_sum, want_sum] : sums) CHECK(rel(got_sum, want_sum) <= kRelTol);
    check_tight(fp4::cpu::metrics_from_sums(g), fp4::cpu::metrics_from_sums(want));
  }
}

TEST_CASE("gpu probe: every slot's copy is the CPU quantize_slot's and its metrics are the CPU's", "[gpu][probe]") {
  const std::string name = GENERATE(as<std::string>{}, "e2m1", "ufp4", "nvfp4", "mxfp4", "ufp4-e4m3", "nvfp4-te",
                                     "four-over-six", "quartet-ii", "tetrajet-v2", "variant");
  INFO("recipe " << name);
  const fp4::engine::Recipe recipe = recipe_named(name);
  REQUIRE(fp4::engine::recipe_error(recipe).empty());
  const fp4::model::ModelShape mc = model_for(recipe);
  const fp4::test::ModelPair models = fp4::test::model_pair(mc, recipe, 11);
  const std::vector<int>& bf16_layers = models.bf16_layers;
  fp4::cuda_model::CudaModel& gpu = *models.gpu;
  fp4::model::Model& cpu = *models.cpu;
  const SmallBatch tokens = batch_for(recipe);
  const fp4::model::StepContext ctx{5, 3, 0};  // the trainer probes with micro-step 0

  // The probe's pass is the training pass: the same loss, and it leaves the gradients alone.
  gpu.zero_grads();
  const fp4::model::PassResult trained = gpu.forward_backward(tokens.view(), ctx, 1.0f);
  const std::vector<float> grads = gpu.grads_to_host(), params = gpu.params_to_host();

  struct Expected {
    uint32_t linear_id;
    Slot slot;
    QuantMetrics metrics;
  };
  std::vector<Expected> expected;
  size_t copies_differ = 0, codes_differ = 0;
  const fp4::cuda_model::ProbeObserver observe = [&](const fp4::engine::LinearSite& site, Slot slot,
                                                     const fp4::cuda_model::ProbedCopy& c) {
    INFO("linear " << site.linear_id << " slot " << fp4::engine::slot_name(slot));
    CHECK(fp4::engine::site_is_quantized(site));
    CHECK(c.spec == fp4::engine::site_slot_spec(site, slot));
    const size_t n = static_cast<size_t>(c.rows) * c.cols;
    const std::vector<bf16_t> source = download(c.source, n, c.stream);
    const std::vector<bf16_t> dequant = download(c.dequant, n, c.stream);
    const std::vector<uint8_t> codes = download(c.codes, n, c.stream);
    const float ts = download(c.tensor_scale, 1, c.stream)[0];
    const fp4::cpu::QuantizedTensor ref = fp4::engine::quantize_slot(site, slot, source.data(), c.rows, c.cols, true);
    for (size_t i = 0; i < n; ++i) {
      copies_differ += dequant[i] != ref.dequant[i];
      codes_differ += codes[i] != ref.codes[i];
    }
    CHECK(std::memcmp(&ts, &ref.tensor_scale, sizeof ts) == 0);
    expected.push_back({site.linear_id, slot, fp4::cpu::quant_metrics(ref)});
  };
  const fp4::cuda_model::ProbeOutcome probed = gpu.probe(tokens.view(), ctx, observe);
  CHECK(copies_differ == 0);
  CHECK(codes_differ == 0);
  CHECK_FALSE(probed.nonfinite);
  CHECK(probed.loss == trained.loss);
  CHECK(fp4::test::same_bits(gpu.grads_to_host(), grads));
  CHECK(fp4::test::same_bits(gpu.params_to_host(), params));

  // The slots: those the CPU model's probe reports, in its order, each measured as the CPU would.
  std::vector<std::pair<uint32_t, Slot>> cpu_order;
  cpu.probe(tokens.view(), ctx, [&](const fp4::engine::LinearSite& site, Slot slot, const bf16_t*, int, int) {
    if (fp4::engine::site_is_quantized(site)) cpu_order.emplace_back(site.linear_id, slot);
  });
  const size_t quantized_blocks = static_cast<size_t>(mc.n_layers) - bf16_layers.size();
  REQUIRE(cpu_order.size() == quantized_blocks * 4 * fp4::engine::kSlotCount);
  REQUIRE(probed.slots.size() == cpu_order.size());
  REQUIRE(expected.size() == cpu_order.size());
  for (size_t i = 0; i < cpu_order.size(); ++i) {
    const fp4::engine::ProbedSlot& p = probed.slots[i];
    INFO("linear " << p.linear_id << " slot " << fp4::engine::slot_name(p.slot));
    CHECK(p.linear_id == cpu_order[i].first);
    CHECK(p.slot == cpu_order[i].second);
    CHECK(p.linear_id == expected[i].linear_id);
    CHECK(p.slot == expected[i].slot);
    CHECK(p.metrics.nonfinite == 0);
    CHECK(std::isfinite(p.metrics.alpha));
    check_tight(p.metrics, expected[i].metrics);
  }

  // Probing twice gives the same bits; training after the probes is training without them.
  const fp4::cuda_model::ProbeOutcome again = gpu.probe(tokens.view(), ctx);
  REQUIRE(again.slots.size() == probed.slots.size());
  for (size_t i = 0; i < again.slots.size(); ++i) {
    const QuantMetrics &a = again.slots[i].metrics, &b = probed.slots[i].metrics;
    CHECK(std::memcmp(&a.alpha, &b.alpha, sizeof a.alpha) == 0);
    CHECK(std::memcmp(&a.nmse, &b.nmse, sizeof a.nmse) == 0);
    CHECK(std::memcmp(&a.shrink, &b.shrink, sizeof a.shrink) == 0);
    CHECK(std::memcmp(&a.b_eff, &b.b_eff, sizeof a.b_eff) == 0);
  }
  gpu.zero_grads();
  const fp4::model::PassResult after = gpu.forward_backward(tokens.view(), ctx, 1.0f);
  CHECK(after.loss == trained.loss);
  CHECK(fp4::test::same_bits(gpu.grads_to_host(), grads));
}

TEST_CASE("gpu probe rows follow the CPU backend's on the same weights and batch", "[gpu][probe]") {
  // Every preset that quantizes every block (nvfp4-te keeps blocks in BF16: its quantized slots are nvfp4's).
  const std::string name = GENERATE(as<std::string>{}, "e2m1", "ufp4", "nvfp4", "mxfp4", "ufp4-e4m3", "four-over-six",
                                     "quartet-ii", "tetrajet-v2");
  INFO("recipe " << name);
  const fp4::engine::Recipe recipe = fp4::engine::recipe_preset(name);
  const fp4::model::ModelShape mc = model_for(recipe);
  const std::vector<int> bf16_layers = fp4::engine::resolve_bf16_layers(recipe.bf16_layers, mc.n_layers);
  auto cpu = fp4::run::make_cpu_backend(mc, recipe, bf16_layers);
  auto gpu = fp4::cuda_model::make_cuda_backend(mc, recipe, bf16_layers);
  cpu->init(11);
  gpu->init(11);
  const SmallBatch tokens = batch_for(recipe);
  const fp4::model::StepContext ctx{5, 3, 0};
  const std::vector<fp4::engine::ProbedSlot> rc = cpu->probe(tokens.view(), ctx);
  const std::vector<fp4::engine::ProbedSlot> rg = gpu->probe(tokens.view(), ctx);
  REQUIRE(rc.size() == static_cast<size_t>(mc.n_layers) * 4 * fp4::engine::kSlotCount);
  REQUIRE(rg.size() == rc.size());
  double worst_alpha = 0, worst_nmse = 0, worst_b_eff = 0;
  for (size_t i = 0; i < rc.size(); ++i) {
    const QuantMetrics &g = rg[i].metrics, &c = rc[i].metrics;
    INFO("linear " << rc[i].linear_id << " slot " << fp4::engine::slot_name(rc[i].slot));
    REQUIRE(rg[i].linear_id == rc[i].linear_id);
    REQUIRE(rg[i].slot == rc[i].slot);
    CHECK(g.count == c.count);
    CHECK(g.nonfinite == c.nonfinite);
    // Same sources on both backends: the weights (the same bf16 copy of the same fp32 masters) and
    // the first linear's X (embedding and RMSNorm forward are bit-identical, kernels/cuda/ops.cuh):
    // then the same copies, so the documented tolerance.
    if (is_weight_slot(rc[i].slot) || (rc[i].linear_id == 0 && rc[i].slot == Slot::fprop_x)) {
      check_tight(g, c);
      continue;
    }
    // Every other source comes out of GEMMs and reductions summed in another order (docs/train.md,
    // "Against the CPU backend"): a few values differ by a bf16 step, a few quantization decisions
    // with them. The slot's statistics stay close, not equal.
    worst_alpha = std::max(worst_alpha, std::abs(g.alpha - c.alpha));
    worst_nmse = std::max(worst_nmse, rel(g.nmse, c.nmse));
    worst_b_eff = std::max(worst_b_eff, std::abs(g.b_eff - c.b_eff));
    CHECK(std::abs(g.alpha - c.alpha) <= 0.02);
    CHECK(rel(g.nmse, c.nmse) <= 0.2);
    CHECK(std::abs(g.shrink - c.shrink) <= 0.02);
    CHECK(std::abs(g.b_eff - c.b_eff) <= 0.05);
  }
  std::printf("probe rows %-9s gpu vs cpu backend, activation and gradient slots: max |d alpha| %.2e, "
              "max rel d nmse %.2e, max |d b_eff| %.2e\n",
              name.c_str(), worst_alpha, worst_nmse, worst_b_eff);
}

TEST_CASE("gpu training with the probe on is bit for bit training without it", "[gpu][probe]") {
  const std::string recipe = GENERATE(as<std::string>{}, "e2m1", "ufp4", "nvfp4", "mxfp4", "ufp4-e4m3");
  INFO("recipe " << recipe);
  fp4::test::ScratchDir tmp;
  // d1 (d_model 64, d_ff 192), 32-token sequences, 2 per micro-step, 2 micro-steps per step; the
  // probe's micro-batch is 64 tokens.
  json j = {{"model", {{"preset", "d1"}, {"seq_len", 32}}},
            {"recipe", recipe},
            {"data", fp4::test::kTinyRunData},
            {"device", "cuda"},
            {"train", {{"steps", 40}, {"batch_tokens", 128}, {"micro_batch", 2}, {"lr", 3e-3}, {"seed", 7}}},
            {"eval", {{"every", 10}, {"tokens", 512}}},
            {"probe", {{"every", 10}}},
            {"checkpoint", {{"every", 20}}}};
  std::ofstream(tmp / "probed.json") << j.dump(2);
  j["probe"]["every"] = 0;
  std::ofstream(tmp / "plain.json") << j.dump(2);
  using fp4::run::Outcome;
  REQUIRE(train_run(tmp / "probed.json", tmp / "probed").outcome == Outcome::succeeded);
  REQUIRE(train_run(tmp / "plain.json", tmp / "plain").outcome == Outcome::succeeded);

  const std::vector<json> probed = fp4::test::plain_rows(fp4::test::read_rows(tmp / "probed"));
  CHECK(without_probe_rows(probed) == fp4::test::plain_rows(fp4::test::read_rows(tmp / "plain")));
  const fp4::run::CheckpointState a = fp4::test::final_state(tmp / "probed"), b = fp4::test::final_state(tmp / "plain");
  CHECK(a.step == b.step);
  CHECK(fp4::test::same_bits(a.params, b.params));
  CHECK(fp4::test::same_bits(a.adam_m, b.adam_m));
  CHECK(fp4::test::same_bits(a.adam_v, b.adam_v));

  // Probes at steps 0, 10, 20, 30, 40: a row per slot of the block's 4 linears, each the whole
  // slot tensor (K, N per linear; T = 64 probe tokens), and a row per GEMM.
  const int d = 64, f = 192, t = 64;
  const int k_of[4] = {d, d, d, f}, n_of[4] = {3 * d, d, 2 * f, d};
  int probe_rows = 0, gemm_rows = 0;
  for (const json& r : probed) {
    if (r["kind"] == "probe_gemm") ++gemm_rows;
    if (r["kind"] != "probe") continue;
    ++probe_rows;
    const std::string linear = r["linear"], slot = r["slot"];
    const int pos = linear == "qkv" ? 0 : linear == "attn_out" ? 1 : linear == "mlp_in" ? 2 : 3;
    const int64_t k = k_of[pos], n = n_of[pos];
    const bool x_slot = slot == "fprop_x" || slot == "wgrad_x", w_slot = slot == "fprop_w" || slot == "dgrad_w";
    const int64_t elements = x_slot ? t * k : w_slot ? n * k : t * n;
    INFO(r.dump());
    CHECK(r["count"].get<int64_t>() + r["nonfinite"].get<int64_t>() == elements);
    CHECK(r["alpha"].is_number());
    CHECK(r["b_eff"].is_number());
  }
  CHECK(probe_rows == 5 * 4 * 6);
  CHECK(gemm_rows == 5 * 4 * 3);
}
