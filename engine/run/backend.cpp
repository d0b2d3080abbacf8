// backend.cpp — see backend.h: the CPU backend, model::Model and run::AdamW as the loop always used
// them (the same calls in the same order, so the CPU bits do not change).
#include "engine/run/backend.h"

#include <stdexcept>
#include <string>
#include <utility>

#include "engine/quantized_linear.h"

namespace fp4::run {

std::vector<ParamRange> param_ranges(const std::vector<model::ParamView>& views) {
  std::vector<ParamRange> r;
  for (const model::ParamView& v : views)
    r.push_back({static_cast<size_t>(v.offset), static_cast<size_t>(v.size), v.kind != model::ParamKind::norm_gain});
  return r;
}

void TrainBackend::connect_ranks(const std::string&, int, int, double) {
  throw std::logic_error(std::string("the ") + device() + " backend has no data parallelism");
}
void TrainBackend::all_reduce(std::span<double>) {
  throw std::logic_error(std::string("the ") + device() + " backend has no data parallelism");
}

namespace {

class CpuBackend final : public TrainBackend {
 public:
  CpuBackend(const model::ModelShape& config, const engine::Recipe& recipe, std::vector<int> bf16_layers)
      : model_(config, recipe, std::move(bf16_layers), model::Storage::bf16),
        opt_(model_.params().size()),
        ranges_(param_ranges(model_.views())) {}

  const char* device() const override { return "cpu"; }
  const model::ModelShape& config() const override { return model_.config(); }
  const std::vector<model::ParamView>& views() const override { return model_.views(); }
  size_t n_params() const override { return model_.params().size(); }

  void init(uint64_t seed) override { model_.init_params(seed); }
  void load_state(TrainState s) override {
    if (s.params.size() != n_params() || s.adam_m.size() != n_params() || s.adam_v.size() != n_params())
      throw std::invalid_argument("cpu backend: a state of the wrong size");
    model_.params() = std::move(s.params);
    opt_.m() = std::move(s.adam_m);
    opt_.v() = std::move(s.adam_v);
  }
  TrainState save_state() override { return {model_.params(), opt_.m(), opt_.v()}; }

  void zero_grads() override { model_.zero_grads(); }
  model::PassResult forward_backward(const model::Batch& batch, const model::StepContext& ctx,
                                     float grad_scale) override {
    return model_.forward_backward(batch, ctx, grad_scale);
  }
  model::EvalResult evaluate(const model::Batch& batch, const model::StepContext& ctx) override {
    return model_.evaluate(batch, ctx);
  }
  double grad_norm() override { return global_grad_norm(model_.grads().data(), model_.grads().size()); }
  void adamw_step(const AdamWHyper& h, int64_t t, float clip) override {
    opt_.step(model_.params().data(), model_.grads().data(), ranges_, h, t, clip);
  }
  std::vector<engine::ProbedSlot> probe(const model::Batch& batch, const model::StepContext& ctx) override {
    std::vector<engine::ProbedSlot> measured;
    const model::ProbeFn fn = [&](const engine::LinearSite& site, engine::Slot slot, const bf16_t* operand, int rows,
                                  int cols) {
      if (!engine::site_is_quantized(site)) return;
      const cpu::QuantizedTensor q = engine::quantize_slot(site, slot, operand, rows, cols, true);
      measured.push_back({site.linear_id, slot, cpu::quant_metrics(q)});
    };
    model_.probe(batch, ctx, fn);
    return measured;
  }

 private:
  model::Model model_;
  AdamW opt_;
  std::vector<ParamRange> ranges_;
};

}  // namespace

std::unique_ptr<TrainBackend> make_cpu_backend(const model::ModelShape& config, const engine::Recipe& recipe,
                                               std::vector<int> bf16_layers) {
  return std::make_unique<CpuBackend>(config, recipe, std::move(bf16_layers));
}

}  // namespace fp4::run
