// probe_bench.cpp — what one shrinkage probe costs on the CUDA backend, against one training step
// measured in the same run (TrainBackend::probe against zero_grads + the step's micro-steps +
// grad_norm + adamw_step, each side ended by a device synchronization).
//
// Usage: fp4lab_bench_probe [--models d6,d12] [--recipes ufp4,nvfp4] [--seq 1024] [--micro-batch 8]
//                           [--batch-tokens 65536] [--repeats 5] [--cpu-probe]
//
// The shape is bench/gpu_train.sh's (the PyTorch peer's): 1024-token sequences, 8 per micro-step,
// 65536 tokens a step (8 micro-steps); the probe is one forward and backward of one micro-batch,
// as the trainer's (docs/train.md). Tokens are a fixed pseudo-random stream over the byte
// vocabulary. After a warm-up step and probe, each repeat times one step and then one probe; the
// table gives the medians and their ratio. --cpu-probe also times, once, the CPU backend's probe on
// the same weights and batch (what the CUDA backend did before it measured on the GPU: a CPU
// forward and backward of the micro-batch with the CPU quantizer; minutes at d6 and beyond).
// Prints a Markdown table; bench/RESULTS.md records it with the command.
#include <cuda_runtime.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "engine/cuda_model/cuda_backend.h"
#include "engine/model/model_shape.h"
#include "engine/recipe.h"
#include "engine/run/backend.h"
#include "kernels/cuda/cuda_common.cuh"  // FP4_CUDA_CHECK

namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

std::vector<std::string> split_list(const std::string& s) {
  std::vector<std::string> out;
  std::stringstream in(s);
  for (std::string item; std::getline(in, item, ',');)
    if (!item.empty()) out.push_back(item);
  return out;
}

[[noreturn]] void usage(const char* why) {
  std::fprintf(stderr,
               "fp4lab_bench_probe: %s\nusage: fp4lab_bench_probe [--models d6,d12] [--recipes ufp4,nvfp4] "
               "[--seq 1024] [--micro-batch 8] [--batch-tokens 65536] [--repeats 5] [--cpu-probe]\n",
               why);
  std::exit(2);
}

struct Options {
  std::vector<std::string> models = {"d6", "d12"};
  std::vector<std::string> recipes = {"ufp4", "nvfp4"};
  int seq = 1024, micro_batch = 8, batch_tokens = 65536, repeats = 5;
  bool cpu_probe = false;
};

Options parse(int argc, char** argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    const auto value = [&]() -> std::string {
      if (i + 1 >= argc) usage(("missing value after " + a).c_str());
      return argv[++i];
    };
    const auto number = [&]() {
      const std::string v = value();
      char* end = nullptr;
      const long n = std::strtol(v.c_str(), &end, 10);
      if (end == v.c_str() || *end != '\0' || n <= 0 || n > (1L << 30)) usage((a + ": expected a positive whole number, got " + v).c_str());
      return static_cast<int>(n);
    };
    if (a == "--models") o.models = split_list(value());
    else if (a == "--recipes") o.recipes = split_list(value());
    else if (a == "--seq") o.seq = number();
    else if (a == "--micro-batch") o.micro_batch = number();
    else if (a == "--batch-tokens") o.batch_tokens = number();
    else if (a == "--repeats") o.repeats = number();
    else if (a == "--cpu-probe") o.cpu_probe = true;
    else usage(("unknown option " + a).c_str());
  }
  if (o.batch_tokens % (o.seq * o.micro_batch) != 0) usage("--batch-tokens must be a multiple of --seq × --micro-batch");
  return o;
}

// A micro-batch of sequences: tokens of a fixed LCG stream (inputs and their next tokens).
struct MicroBatch {
  std::vector<int32_t> inputs, targets;
  fp4::model::Batch view(int batch, int seq) const {
    fp4::model::Batch b;
    b.inputs = inputs.data();
    b.targets = targets.data();
    b.batch_size = batch;
    b.seq_len = seq;
    return b;
  }
};

std::vector<MicroBatch> make_batches(int count, int batch, int seq, int vocab) {
  uint64_t state = 0x853c49e6748fea9bull;
  const auto next = [&]() {
    state = state * 6364136223846793005ull + 1442695040888963407ull;
    return static_cast<int32_t>((state >> 33) % static_cast<uint64_t>(vocab));
  };
  std::vector<MicroBatch> out(count);
  for (MicroBatch& m : out) {
    const size_t n = static_cast<size_t>(batch) * seq;
    m.inputs.resize(n);
    m.targets.resize(n);
    int32_t prev = next();
    for (size_t i = 0; i < n; ++i) {
      m.inputs[i] = prev;
      prev = next();
      m.targets[i] = prev;
    }
  }
  return out;
}

}  // namespace

int main(int argc, char** argv) try {
  const Options o = parse(argc, argv);
  const int accum = o.batch_tokens / (o.seq * o.micro_batch);
  std::printf("| model | recipe | step ms (%d micro-steps of %d×%d) | probe ms | probe / step | probed slots |%s\n",
              accum, o.micro_batch, o.seq, o.cpu_probe ? " cpu probe s |" : "");
  std::printf("|---|---|---|---|---|---|%s\n", o.cpu_probe ? "---|" : "");
  for (const std::string& model : o.models) {
    for (const std::string& recipe_name : o.recipes) {
      const fp4::model::ModelShape mc = fp4::model::model_preset(model);
      const fp4::engine::Recipe recipe = fp4::engine::recipe_preset(recipe_name);
      const std::vector<int> bf16_layers = fp4::engine::resolve_bf16_layers(recipe.bf16_layers, mc.n_layers);
      std::unique_ptr<fp4::run::TrainBackend> gpu = fp4::cuda_model::make_cuda_backend(mc, recipe, bf16_layers);
      gpu->init(0);
      const std::vector<MicroBatch> batches = make_batches(accum, o.micro_batch, o.seq, mc.vocab_size);
      fp4::run::AdamWHyper h;
      h.lr = 1e-3;
      int64_t step = 0;
      const auto train_step = [&]() {
        gpu->zero_grads();
        for (int k = 0; k < accum; ++k)
          gpu->forward_backward(batches[k].view(o.micro_batch, o.seq),
                                fp4::model::StepContext{0, static_cast<uint32_t>(step), static_cast<uint32_t>(k)},
                                1.0f / static_cast<float>(accum));
        const double norm = gpu->grad_norm();
        ++step;
        gpu->adamw_step(h, step, norm > 1.0 ? static_cast<float>(1.0 / norm) : 1.0f);
        FP4_CUDA_CHECK(cudaDeviceSynchronize());
      };
      size_t slots = 0;
      const auto probe = [&]() {
        slots = gpu->probe(batches[0].view(o.micro_batch, o.seq),
                           fp4::model::StepContext{0, static_cast<uint32_t>(step), 0})
                    .size();
      };
      train_step();  // warm-up: every buffer allocated, cuBLASLt's plans made
      probe();
      std::vector<double> step_s, probe_s;
      for (int r = 0; r < o.repeats; ++r) {
        auto t0 = Clock::now();
        train_step();
        step_s.push_back(seconds_since(t0));
        t0 = Clock::now();
        probe();
        probe_s.push_back(seconds_since(t0));
      }
      const double ms = 1e3 * median(step_s), pm = 1e3 * median(probe_s);
      std::printf("| %s | %s | %.1f | %.1f | %.3f | %zu |", model.c_str(), recipe_name.c_str(), ms, pm, pm / ms, slots);
      if (o.cpu_probe) {
        std::unique_ptr<fp4::run::TrainBackend> cpu = fp4::run::make_cpu_backend(mc, recipe, bf16_layers);
        fp4::run::TrainState state = gpu->save_state();
        cpu->load_state(std::move(state));
        const auto t0 = Clock::now();
        cpu->probe(batches[0].view(o.micro_batch, o.seq), fp4::model::StepContext{0, static_cast<uint32_t>(step), 0});
        std::printf(" %.1f |", seconds_since(t0));
      }
      std::printf("\n");
      std::fflush(stdout);
    }
  }
  return 0;
} catch (const std::exception& e) {
  std::fprintf(stderr, "fp4lab_bench_probe: %s\n", e.what());
  return 1;
}
