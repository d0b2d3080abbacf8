// trainer.cpp — see trainer.h; docs/train.md documents every file and row this writes.
#include "engine/run/trainer.h"

#include <omp.h>

#include <algorithm>
#include <cmath>
#include <csignal>
#include <cstdlib>
#include <memory>
#include <numbers>
#include <optional>
#include <span>
#include <stdexcept>
#include <type_traits>
#include <vector>

#include <fmt/format.h>

#include "base/clock.h"
#include "base/directory_lock.h"
#include "base/linear_sites.h"
#include "base/files.h"
#include "base/format.h"
#include "base/stop_signals.h"
#include "base/user_error.h"
#include "engine/data/data_source.h"
#include "engine/model/model_shape.h"
#include "engine/model/transformer.h"
#include "engine/run/backend.h"
#include "engine/run/checkpoint.h"
#include "engine/run/config.h"
#include "engine/run/data_split.h"
#include "engine/run/heartbeat.h"
#include "engine/run/memory_need.h"
#include "engine/run/metrics.h"
#include "engine/run/optimizer.h"
#include "base/probe_rows.h"
#include "engine/run/ranks.h"
#include "engine/run/run_dir.h"
#include "engine/run/schedule.h"

#ifdef FP4LAB_HAVE_CUDA
#include "engine/cuda_model/cuda_backend.h"
#endif

namespace fp4::run {

namespace {

using nlohmann::json;

// ---- Batches -------------------------------------------------------------------------------------

// The model's view of B sequences: inputs and targets [B, T], split from the data's layout of
// B runs of T + 1 tokens.
struct Tokens {
  std::vector<int32_t> inputs, targets;
  int batch = 0, seq_len = 0;

  model::Batch view(int64_t first_sequence = 0, int count = -1) const {
    model::Batch b;
    const size_t at = static_cast<size_t>(first_sequence) * static_cast<size_t>(seq_len);
    b.inputs = inputs.data() + at;
    b.targets = targets.data() + at;
    b.batch_size = count < 0 ? batch : count;
    b.seq_len = seq_len;
    return b;
  }
};

void split_sequences(const int32_t* runs, int batch, int seq_len, Tokens& out) {
  const size_t t = static_cast<size_t>(seq_len);
  out.batch = batch;
  out.seq_len = seq_len;
  out.inputs.resize(static_cast<size_t>(batch) * t);
  out.targets.resize(static_cast<size_t>(batch) * t);
  for (size_t r = 0; r < static_cast<size_t>(batch); ++r)
    for (size_t j = 0; j < t; ++j) {
      out.inputs[r * t + j] = runs[r * (t + 1) + j];
      out.targets[r * t + j] = runs[r * (t + 1) + j + 1];
    }
}

// The fixed held-out set: eval.tokens / T sequences over eval.tokens + 1 consecutive validation
// tokens (neighbours share a token, as in the train stream), so eval.tokens tokens are predicted.
struct EvalSet {
  Tokens tokens;
  double bytes_per_token = 0.0;  // byte tokenizer only: document bytes per token (else 0: no bpb)
};

EvalSet make_eval_set(const data::DataSource& data, const RunConfig& c) {
  const uint64_t need = static_cast<uint64_t>(c.eval.tokens) + 1;
  if (data.validation_tokens() != 0 && data.validation_tokens() < need)
    throw UserError(fmt::format(
        "eval.tokens = {} needs {} validation tokens, but data \"{}\" has {}: lower eval.tokens", c.eval.tokens,
        need, c.data, data.validation_tokens()));
  const data::ValidationSet v = data.validation(need);
  if (v.tokens.size() < need)
    throw UserError(fmt::format("data \"{}\" gave {} validation tokens, eval.tokens = {} needs {}", c.data,
                                v.tokens.size(), c.eval.tokens, need));
  EvalSet e;
  const int t = c.model.seq_len;
  const int sequences = static_cast<int>(c.eval.tokens / t);
  std::vector<int32_t> runs(static_cast<size_t>(sequences) * (t + 1));
  for (size_t r = 0; r < static_cast<size_t>(sequences); ++r)
    for (size_t j = 0; j <= static_cast<size_t>(t); ++j) runs[r * (t + 1) + j] = v.tokens[r * t + j];
  split_sequences(runs.data(), sequences, t, e.tokens);
  // Bits per byte needs bytes: only byte-tokenized shards count their document bytes (separators
  // are not text). A synthetic source has no bytes, whatever its vocabulary: no bpb for it.
  if (v.document_bytes > 0)
    e.bytes_per_token = static_cast<double>(v.document_bytes) / static_cast<double>(v.tokens.size());
  return e;
}

struct EvalOutcome {
  double loss = 0.0;  // nats per token
  bool nonfinite = false;
};

// Mean cross-entropy over the held-out set in micro-batches of B sequences, summed in order.
EvalOutcome evaluate(TrainBackend& m, const EvalSet& e, int micro_batch, const model::StepContext& ctx) {
  double sum = 0.0;
  int64_t count = 0;
  bool nonfinite = false;
  for (int first = 0; first < e.tokens.batch; first += micro_batch) {
    const int n = std::min(micro_batch, e.tokens.batch - first);
    const model::EvalResult r = m.evaluate(e.tokens.view(first, n), ctx);
    sum += r.loss_sum;
    count += r.tokens;
    nonfinite = nonfinite || r.nonfinite;
  }
  const double loss = sum / static_cast<double>(count);
  return {loss, nonfinite || !std::isfinite(loss)};
}

// ---- MoE routing (docs/train.md, metrics.jsonl's "moe" rows) -------------------------------------

// One "moe" row per MoE block for a step's passes (without step and tokens): the load of each
// routed expert as its fraction of the step's token-to-expert assignments (min, max, and the
// coefficient of variation std/mean, population std, over the experts), and the balancing and z
// losses (without coefficients) averaged over the micro-steps. Empty for a dense model.
std::vector<json> moe_step_rows(const std::vector<model::PassResult>& passes) {
  std::vector<json> rows;
  if (passes.empty() || passes.front().moe.empty()) return rows;
  for (size_t i = 0; i < passes.front().moe.size(); ++i) {
    const model::MoeLayerStats& first = passes.front().moe[i];
    std::vector<double> counts(first.counts.size(), 0.0);
    double balance = 0.0, z = 0.0;
    for (const model::PassResult& p : passes) {
      for (size_t e = 0; e < counts.size(); ++e) counts[e] += static_cast<double>(p.moe[i].counts[e]);
      balance += p.moe[i].balance;
      z += p.moe[i].z;
    }
    double total = 0.0;
    for (double c : counts) total += c;
    const double n = static_cast<double>(counts.size()), mean = 1.0 / n;
    double lo = 1.0, hi = 0.0, var = 0.0;
    for (double c : counts) {
      const double f = c / total;
      lo = std::min(lo, f);
      hi = std::max(hi, f);
      var += (f - mean) * (f - mean);
    }
    rows.push_back({{"kind", "moe"},
                    {"layer", first.block},
                    {"load_min", lo},
                    {"load_max", hi},
                    {"load_cv", std::sqrt(var / n) / mean},
                    {"balance", finite_or_null(balance / static_cast<double>(passes.size()))},
                    {"z", finite_or_null(z / static_cast<double>(passes.size()))}});
  }
  return rows;
}

// ---- The shrinkage probe (NUMERICS.md §8) ------------------------------------------------------

// A probe row (base/probe_rows.h) as metrics.jsonl carries it: its kind, the tokens seen at
// its step, and its fields, a non-finite real as null.
template <class Row>
json probe_row_json(const Row& r, int64_t tokens) {
  json row{{"kind", Row::kKind}, {"tokens", tokens}};
  Row::for_each_field(r, [&](const char* name, bool, const auto& v) {
    if constexpr (std::is_same_v<std::decay_t<decltype(v)>, double>)
      row[name] = finite_or_null(v);
    else
      row[name] = v;
  });
  return row;
}

// The backend's probe (TrainBackend::probe: a forward and backward that measures every quantized
// slot, on the CPU or on the GPU) on the first micro-batch of the held-out set (fixed, so probes at
// different steps measure the same inputs). Writes a "probe" row per quantized slot and a
// "probe_gemm" row (eta) per GEMM. Touches no training state.
void run_probe(TrainBackend& m, const EvalSet& e, int micro_batch, const model::StepContext& ctx,
               MetricsWriter& metrics, int64_t step, int64_t tokens) {
  const std::vector<engine::ProbedSlot> measured = m.probe(e.tokens.view(0, std::min(micro_batch, e.tokens.batch)), ctx);

  for (const engine::ProbedSlot& x : measured) {
    SlotProbeRow r;
    r.step = step;
    r.layer = site_block(x.linear_id);
    r.linear = kLinearNames[site_position(x.linear_id)];
    r.slot = engine::slot_name(x.slot);
    r.gemm = kGemmNames[static_cast<int>(engine::slot_gemm(x.slot))];
    r.alpha = x.metrics.alpha;
    r.nmse = x.metrics.nmse;
    r.sqnr_db = x.metrics.sqnr_db;
    r.shrink = x.metrics.shrink;
    r.b_eff = x.metrics.b_eff;
    r.count = x.metrics.count;
    r.nonfinite = x.metrics.nonfinite;
    metrics.write(probe_row_json(r, tokens));
  }
  // eta = alpha_A · alpha_B for each GEMM whose two operands were both measured.
  for (size_t i = 0; i < measured.size(); ++i) {
    const int slot_a = static_cast<int>(measured[i].slot);
    if (slot_a % 2 != 0) continue;  // A operands are the even slots (fprop_x, dgrad_dy, wgrad_dy)
    for (size_t j = 0; j < measured.size(); ++j) {
      if (measured[j].linear_id != measured[i].linear_id || static_cast<int>(measured[j].slot) != slot_a + 1) continue;
      GemmProbeRow g;
      g.step = step;
      g.layer = site_block(measured[i].linear_id);
      g.linear = kLinearNames[site_position(measured[i].linear_id)];
      g.gemm = kGemmNames[slot_a / 2];
      g.alpha_a = measured[i].metrics.alpha;
      g.alpha_b = measured[j].metrics.alpha;
      g.eta = measured[i].metrics.alpha * measured[j].metrics.alpha;
      metrics.write(probe_row_json(g, tokens));
      break;
    }
  }
}

// ---- The run directory ------------------------------------------------------------------------

bool holds_a_run(const RunPaths& p) {
  std::error_code ec;
  for (const auto* f : {&p.config, &p.metrics, &p.checkpoints, &p.status, &p.log})
    if (std::filesystem::exists(*f, ec)) return true;
  return false;
}

// ---- The run ---------------------------------------------------------------------------------

// Everything the loop needs, checked and opened before anything is written into the directory.
struct Setup {
  RunConfig config;
  std::string device_choice;  // pick_device's account, for the log
  std::string hash;
  std::unique_ptr<data::DataSource> data;
  std::unique_ptr<TrainBackend> backend;  // config.device's
  EvalSet eval;
  std::optional<LoadedCheckpoint> checkpoint;
  std::optional<RankInfo> rank;  // a rank of a data-parallel run (rank 0 alone writes)
  bool writer() const { return !rank || rank->writer(); }
};

TrainResult result_from_status(const json& status, const RunConfig& c) {
  TrainResult r;
  r.outcome = status.at("state") == "succeeded" ? Outcome::succeeded : Outcome::diverged;
  r.step = status.contains("step") && status["step"].is_number_integer() ? status["step"].get<int64_t>() : c.train.steps;
  r.reason = status.contains("reason") && status["reason"].is_string() ? status["reason"].get<std::string>() : "";
  return r;
}

void write_checkpoint_now(const Setup& s, const RunPaths& paths, TrainBackend& m, const data::TrainStream& stream,
                          int64_t step, int64_t tokens, MetricsWriter& metrics, TrainLog& log) {
  metrics.sync();  // rows up to here survive whatever survives the checkpoint
  CheckpointState st;
  st.step = step;
  st.tokens_seen = tokens;
  st.config_hash = s.hash;
  st.data_position = stream.position().to_json();
  st.extra = {{"data_fingerprint", s.data->fingerprint()}, {"gpus", s.config.gpus}, {"numerics", m.numerics()}};
  TrainState state = m.save_state();
  st.params = std::move(state.params);
  st.adam_m = std::move(state.adam_m);
  st.adam_v = std::move(state.adam_v);
  const auto path = write_checkpoint(paths.checkpoints, st);
  log.line(fmt::format("checkpoint {} written", path.filename().string()));
}

TrainResult run_loop(Setup& s, const TrainOptions& o, const RunPaths& paths, TrainLog& log, Heartbeat& heartbeat) {
  const RunConfig& c = s.config;
  TrainBackend& m = *s.backend;
  const int64_t accum = c.grad_accum();
  const int b = c.train.micro_batch, t = c.model.seq_len;
  // Data parallelism: this rank's micro-steps of each step (all of them without ranks). Only rank
  // 0 writes (metrics, checkpoints, status); every rank runs the same loop, evaluations included,
  // so that every decision (diverged, stop, the end) is taken by all of them at the same step.
  const bool distributed = s.rank.has_value();
  const bool writer = s.writer();
  const RankShare share = distributed ? rank_share(accum, s.rank->world, s.rank->rank) : RankShare{0, accum};

  // Resume or start.
  int64_t step = 0, tokens = 0;
  std::unique_ptr<data::TrainStream> stream;
  if (s.checkpoint) {
    CheckpointState& st = s.checkpoint->state;
    m.load_state(TrainState{std::move(st.params), std::move(st.adam_m), std::move(st.adam_v)});
    step = st.step;
    tokens = st.tokens_seen;
    stream = s.data->train_stream(data::StreamPosition::from_json(st.data_position), train_stream_order(c));
    log.line(fmt::format("resuming from {} (step {}, {} tokens)", s.checkpoint->path.filename().string(), step, tokens));
  } else {
    m.init(c.train.seed);
    stream = s.data->train_stream(s.data->start(), train_stream_order(c));
    log.line(o.resume ? "no checkpoint to resume from: starting from scratch" : "starting");
  }

  MetricsWriter metrics(writer ? paths.metrics : std::filesystem::path());
  heartbeat.set_step(step);
  heartbeat.set_phase("train");

  const model::ModelShape& mc = m.config();
  const int64_t n_nonemb = model::nonembedding_params(mc);
  const double flops_per_token = model::train_flops_per_token(mc, t);
  json run_row = {{"kind", "run"},
                 {"step", step},
                 {"tokens", tokens},
                 {"event", s.checkpoint ? "resume" : "start"},
                 {"device", m.device()},
                 {"config_hash", s.hash},
                 {"data_fingerprint", s.data->fingerprint()},
                 {"numerics", m.numerics()},
                 {"vocab_size", mc.vocab_size},
                 {"n_params", model::total_params(mc)},
                 {"n_params_nonembedding", n_nonemb},
                 {"flops_per_token", flops_per_token},
                 {"tokens_total", c.train.tokens},
                 {"compute_6nd", 6.0 * static_cast<double>(model::active_nonembedding_params(mc)) *
                                     static_cast<double>(c.train.tokens)},
                 {"flops_total", flops_per_token * static_cast<double>(c.train.tokens)},
                 {"grad_accum", accum},
                 {"threads", omp_get_max_threads()},
                 {"version", FP4LAB_VERSION}};
  if (distributed) run_row["gpus"] = s.rank->world;  // data parallelism (absent: one process)
  if (mc.moe.enabled()) {  // docs/model.md, "Sizes of MoE models": the parameters one token uses
    run_row["n_params_active"] = model::active_params(mc);
    run_row["n_params_active_nonembedding"] = model::active_nonembedding_params(mc);
  }
  metrics.write(run_row);
  if (distributed)
    log.line(fmt::format("data parallel over {} GPU(s): each takes {} of the {} micro-steps of a step, the gradients "
                         "are summed with NCCL (fp32) after the last",
                         s.rank->world, share.count, accum));
  const std::string active =
      mc.moe.enabled() ? fmt::format(", {} active ({} non-embedding)", model::active_params(mc),
                                     model::active_nonembedding_params(mc))
                       : std::string();
  log.line(fmt::format("model {}: {} parameters ({} non-embedding{}); recipe {}; {} steps of {} tokens "
                       "({} micro-steps of {}×{}); data {} ({}); device {} ({})",
                       model::describe(mc), model::total_params(mc), n_nonemb, active, c.recipe.name, c.train.steps,
                       c.train.batch_tokens, accum, b, t, c.data,
                       c.train.shuffle == Shuffle::sequences
                           ? fmt::format("shuffled by sequence, data seed {}", c.train.data_seed)
                           : std::string("in file order"),
                       m.device(), s.device_choice));

  const auto ctx_at = [&](int64_t completed, uint32_t micro) {
    return model::StepContext{c.train.seed, static_cast<uint32_t>(completed), micro};
  };
  // A device backend reports its memory high-water mark when the process is done with the run: in
  // train.log and in a closing "run" row (the start row's fields, event "end", peak_device_bytes).
  const auto device_summary = [&](int64_t at) {
    const int64_t peak = m.peak_device_bytes();
    if (peak < 0) return;
    json row = run_row;
    row["event"] = "end";
    row["step"] = at;
    row["tokens"] = at * c.train.batch_tokens;
    row["peak_device_bytes"] = peak;
    metrics.write(row);
    log.line(fmt::format("peak device memory {:.1f} MiB ({} bytes, cudaMemGetInfo: the whole device)",
                         static_cast<double>(peak) / (1024.0 * 1024.0), peak));
  };
  const auto diverge = [&](int64_t at, const std::string& reason) {
    device_summary(at);
    if (writer) write_status(paths.status, {{"state", "diverged"}, {"step", at}, {"reason", reason}});
    log.line(fmt::format("diverged at step {}: {}", at, reason));
    return TrainResult{Outcome::diverged, at, reason, 0};
  };
  const auto eval_now = [&](int64_t at) -> std::optional<std::string> {
    heartbeat.set_phase("eval");
    const EvalOutcome r = evaluate(m, s.eval, b, ctx_at(at, 0));
    json row = {{"kind", "eval"}, {"step", at}, {"tokens", at * c.train.batch_tokens},
                {"loss", finite_or_null(r.loss)}, {"eval_tokens", c.eval.tokens}};
    std::string line = fmt::format("eval at step {}: loss {:.4f} nats/token", at, r.loss);
    if (s.eval.bytes_per_token > 0) {
      const double bpb = r.loss / std::numbers::ln2 / s.eval.bytes_per_token;
      row["bpb"] = finite_or_null(bpb);
      line += fmt::format(", {:.4f} bits/byte", bpb);
    }
    metrics.write(row);
    log.line(line);
    heartbeat.set_phase("train");
    if (r.nonfinite) return std::string("non-finite validation loss");
    return std::nullopt;
  };
  const auto probe_now = [&](int64_t at) {
    heartbeat.set_phase("probe");
    run_probe(m, s.eval, b, ctx_at(at, 0), metrics, at, at * c.train.batch_tokens);
    heartbeat.set_phase("train");
  };

  // A fresh run measures its starting point.
  if (step == 0) {
    if (auto why = eval_now(0)) return diverge(0, *why);
    if (writer && c.probe.every > 0 && c.recipe.quantized) probe_now(0);
  }

  std::vector<int32_t> runs(static_cast<size_t>(b) * (t + 1));
  Tokens micro;
  // Each micro-step's loss at its index, then (with ranks) the non-finite flag and the stop
  // request: summed over the ranks with the gradients, each loss arrives exactly (the other ranks
  // add zeros) and the loss below is summed in micro-step order whatever the number of ranks.
  std::vector<double> scalars(static_cast<size_t>(accum) + 2, 0.0);
  std::vector<int64_t> micro_steps;  // the indices of the micro-steps enqueued in this step
  const float grad_scale = 1.0f / static_cast<float>(accum);
  const int64_t log_every = std::max<int64_t>(1, c.train.steps / 50);
  const double session_start = monotonic_s();
  const int64_t session_first = step;
  double last_log = session_start;

  while (step < c.train.steps) {
    const double step_start = monotonic_s();
    const int64_t index = step;  // the step being taken, as the random streams number it
    m.zero_grads();
    std::fill(scalars.begin(), scalars.end(), 0.0);
    bool nonfinite = false;
    // A micro-batch keeps its index k in the step as its micro-step in the random streams, on
    // whichever rank trains it (NUMERICS.md §6).
    // The passes are enqueued as the micro-batches are read and finished together (a GPU runs
    // micro-step k while the host reads k+1); each result keeps its micro-step's index.
    micro_steps.clear();
    read_step(*stream, b, t, accum, share, std::span<int32_t>(runs), [&](int64_t k) {
      split_sequences(runs.data(), b, t, micro);
      m.enqueue_pass(micro.view(), ctx_at(index, static_cast<uint32_t>(k)), grad_scale);
      micro_steps.push_back(k);
    });
    const std::vector<model::PassResult> passes = m.finish_passes();
    if (passes.size() != micro_steps.size())
      throw std::logic_error(fmt::format("trainer: {} micro-steps enqueued, {} results", micro_steps.size(),
                                         passes.size()));
    for (size_t j = 0; j < passes.size(); ++j) {
      scalars[static_cast<size_t>(micro_steps[j])] = passes[j].loss;
      nonfinite = nonfinite || passes[j].nonfinite;
    }
    // An MoE model's routing over the step (one process: MoE models do not train on several GPUs).
    const std::vector<json> moe_rows = moe_step_rows(passes);
    bool stop_agreed = false;
    if (distributed) {
      // The gradients were scaled by 1/A per micro-step, so their fp32 sum over the ranks is the
      // 1-GPU run's mean over the A micro-batches; only the order of the additions differs.
      scalars[static_cast<size_t>(accum)] = nonfinite ? 1.0 : 0.0;
      scalars[static_cast<size_t>(accum) + 1] = StopSignals::first() != 0 || index + 1 == o.stop_after ? 1.0 : 0.0;
      m.all_reduce(scalars);
      nonfinite = scalars[static_cast<size_t>(accum)] != 0.0;
      stop_agreed = scalars[static_cast<size_t>(accum) + 1] != 0.0;
    }
    double loss_sum = 0.0;
    for (int64_t k = 0; k < accum; ++k) loss_sum += scalars[static_cast<size_t>(k)];
    const double loss = loss_sum / static_cast<double>(accum);
    const double norm = m.grad_norm();
    const double lr = learning_rate(c.train, index);
    ++step;
    tokens += c.train.batch_tokens;
    if (nonfinite || !std::isfinite(loss) || !std::isfinite(norm)) {
      metrics.write({{"kind", "train"}, {"step", step}, {"tokens", tokens}, {"loss", finite_or_null(loss)},
                     {"lr", lr}, {"grad_norm", finite_or_null(norm)}});
      // The model's flag also covers a non-finite loss, so the loss is asked about first.
      return diverge(step, !std::isfinite(loss) ? "non-finite training loss"
                           : nonfinite          ? "a quantizer met a non-finite value (NaN or Inf)"
                                                : "non-finite gradient norm");
    }
    AdamWHyper h;
    h.lr = lr;
    h.beta1 = c.train.beta1;
    h.beta2 = c.train.beta2;
    h.eps = c.train.eps;
    h.weight_decay = c.train.weight_decay;
    m.adamw_step(h, step, clip_scale(norm, c.train.grad_clip));
    heartbeat.set_step(step);

    const double now = monotonic_s();
    const double rate = static_cast<double>(c.train.batch_tokens) / std::max(now - step_start, 1e-9);
    json train_row = {{"kind", "train"}, {"step", step},       {"tokens", tokens},       {"loss", loss},
                      {"lr", lr},        {"grad_norm", norm}, {"tokens_per_s", rate}, {"elapsed_s", now - session_start}};
    if (!moe_rows.empty()) {
      double aux = 0.0;
      for (const model::PassResult& p : passes) aux += p.aux_loss;
      train_row["aux_loss"] = aux / static_cast<double>(passes.size());
    }
    metrics.write(train_row);
    for (json row : moe_rows) {
      row["step"] = step;
      row["tokens"] = tokens;
      metrics.write(row);
    }
    if (step == session_first + 1 || step % log_every == 0 || step == c.train.steps || now - last_log >= 30.0) {
      const double per_step = (now - session_start) / static_cast<double>(step - session_first);
      log.line(fmt::format("step {}/{} | loss {:.4f} | lr {:.3e} | grad norm {:.3f} | {} tok/s | ETA {}", step,
                           c.train.steps, loss, lr, norm, format_rate(rate),
                           format_duration(per_step * static_cast<double>(c.train.steps - step))));
      last_log = now;
    }

    if ((c.eval.every > 0 && step % c.eval.every == 0) || step == c.train.steps)
      if (auto why = eval_now(step)) return diverge(step, *why);
    if (writer && c.probe.every > 0 && c.recipe.quantized && step % c.probe.every == 0) probe_now(step);

    // With ranks, the request the ranks agreed on in this step's all-reduce (a signal that reached
    // one rank later counts in the next step), so that all of them stop after the same step.
    const int stop = distributed ? (stop_agreed ? (StopSignals::first() != 0 ? StopSignals::first() : SIGTERM) : 0)
                     : StopSignals::first() != 0 ? StopSignals::first()
                                                 : (step == o.stop_after ? SIGTERM : 0);
    if (writer && ((c.checkpoint.every > 0 && step % c.checkpoint.every == 0) || step == c.train.steps || stop != 0)) {
      heartbeat.set_phase("checkpoint");
      write_checkpoint_now(s, paths, m, *stream, step, tokens, metrics, log);
      heartbeat.set_phase("train");
    }
    if (stop != 0 && step < c.train.steps) {
      device_summary(step);
      log.line(fmt::format("stopped by {} after step {}: the checkpoint is written, continue with --resume",
                           stop_signal_name(stop), step));
      return TrainResult{Outcome::interrupted, step, "", stop};
    }
  }

  device_summary(step);
  if (writer) write_status(paths.status, {{"state", "succeeded"}, {"step", step}, {"tokens", tokens}});
  log.line(fmt::format("succeeded: {} steps, {} tokens", step, tokens));
  return TrainResult{Outcome::succeeded, step, "", 0};
}

}  // namespace

int exit_code(const TrainResult& r) {
  switch (r.outcome) {
    case Outcome::succeeded: return 0;
    case Outcome::diverged: return kExitDiverged;
    case Outcome::interrupted: return 128 + r.signal;
  }
  return 1;
}

std::string pick_device(RunConfig& config, const std::string& device_flag) {
  if (!device_flag.empty()) {
    set_device(config, device_flag, "--device");
    return "from --device";
  }
  if (config.device_named) return "from the config";
  if (config.model.moe.enabled()) {
    config.device = "cpu";
    return "picked: the config names no device, and MoE models pick the CPU (their CUDA path is a first, "
           "unmeasured version: --device cuda uses it)";
  }
#ifdef FP4LAB_HAVE_CUDA
  if (cuda_model::cuda_device_visible()) {
    config.device = "cuda";
    return "picked: the config names no device and a GPU is visible; --device cpu trains on the CPU";
  }
  config.device = "cpu";
  return "picked: the config names no device and no GPU is visible";
#else
  config.device = "cpu";
  return "picked: the config names no device and this fp4lab was built without CUDA";
#endif
}

namespace {

RunConfig planned(const TrainOptions& o, std::string* device_choice) {
  RunConfig c = load_config(o.config);
  std::string choice = pick_device(c, o.device);  // part of the config (and hash)
  if (device_choice != nullptr) *device_choice = std::move(choice);
  if (o.gpus > 0) set_gpus(c, o.gpus, "--gpus");
  if (std::string e = device_error(c.device); !e.empty()) throw UserError(o.config.string() + ": " + e);
  // Checked again now that the device is known (the config may have left it to pick_device).
  if (std::string e = gpus_error(c, c.gpus); !e.empty()) throw UserError(o.config.string() + ": " + e);
  if (o.rank && c.device != "cuda")
    throw UserError(fmt::format("RANK={} is set, so this process is a rank of a multi-GPU run, which trains on "
                                "device \"cuda\"; the run's device is \"{}\": unset RANK and WORLD_SIZE",
                                o.rank->rank, c.device));
  if (o.rank && o.rank->world != c.gpus)
    throw UserError(fmt::format("WORLD_SIZE={} but the run trains on gpus = {}: pass --gpus {} (gpus is part of the "
                                "run's config) or start {} rank(s)",
                                o.rank->world, c.gpus, o.rank->world, c.gpus));
#ifdef FP4LAB_HAVE_CUDA
  if (c.gpus > 1 || o.rank) {
    if (!cuda_model::nccl_built())
      throw UserError(fmt::format("gpus = {}: this fp4lab was built without NCCL, which multi-GPU runs need; rebuild "
                                  "it with NCCL (nccl.h and libnccl beside the CUDA toolkit) or train on 1 GPU",
                                  c.gpus));
    const int visible = cuda_model::cuda_device_count();
    if (!o.rank && visible < c.gpus) {
      const char* cvd = std::getenv("CUDA_VISIBLE_DEVICES");
      throw UserError(fmt::format("gpus = {}: only {} GPU(s) are visible (CUDA_VISIBLE_DEVICES={}): train on at most "
                                  "{} GPU(s) (--gpus) or make more visible",
                                  c.gpus, visible, cvd ? cvd : "unset", visible));
    }
  }
#endif
  return c;
}

// Opens what every rank needs before it trains: the data, the backend (after the memory checks),
// the held-out set.
void open_run(Setup& s) {
  s.data = data::open_data(s.config.data);
  // Refused before anything large is allocated: what the run needs against what the machine has.
  check_memory(host_memory_need(s.config, s.data->vocab_size()), available_host_memory(), "host memory", s.config);
#ifdef FP4LAB_HAVE_CUDA
  if (s.config.device == "cuda")
    check_memory(device_memory_need(s.config, s.data->vocab_size()), cuda_model::cuda_free_memory(),
                 "memory on the GPU", s.config);
#endif
  {
    const model::ModelShape mc = s.config.model.shape(static_cast<int>(s.data->vocab_size()));
    model::validate(mc);
    std::vector<int> bf16_layers = engine::resolve_bf16_layers(s.config.recipe.bf16_layers, mc.n_layers);
    if (s.config.device == "cuda") {
#ifdef FP4LAB_HAVE_CUDA
      s.backend = cuda_model::make_cuda_backend(mc, s.config.recipe, std::move(bf16_layers));
#else
      throw UserError(device_error("cuda"));  // refused above, before anything was written
#endif
    } else {
      s.backend = make_cpu_backend(mc, s.config.recipe, std::move(bf16_layers));
    }
  }
  s.eval = make_eval_set(*s.data, s.config);
}

// The resume refusal for another number of GPUs: its own line, before the config's hash (which
// holds gpus) would say only "differs".
void refuse_other_gpus(int theirs, int ours, const std::string& what) {
  if (theirs == ours) return;
  throw UserError(fmt::format("cannot resume: {} was trained on {} GPU(s), this run asks for {}: resume with --gpus {} "
                              "(another number of GPUs sums the gradients in another order, so gives other bits)",
                              what, theirs, ours, theirs));
}

// A rank other than 0: waits for rank 0's rendezvous (written once all of the run's checks have
// passed), opens the same run, reads the checkpoint rank 0 resumes from, joins the communicator
// and runs the loop writing nothing.
TrainResult train_follower(Setup& s, const TrainOptions& o) {
  const RunPaths paths(o.dir);
  const double timeout = rank_timeout_s();
  const Rendezvous rv = wait_for_rendezvous(o.dir, s.rank->token, timeout);
  if (rv.nccl_id.empty()) {
    // Rank 0 found the run finished: its outcome, as rank 0 reports it.
    const json status = read_status(paths.status);
    if (status.is_object() && status.contains("state") && status["state"].is_string()) return result_from_status(status, s.config);
    return TrainResult{};
  }
  open_run(s);
  if (!rv.checkpoint.empty()) {
    LoadedCheckpoint lc;
    lc.path = rv.checkpoint;
    std::string bytes;
    try {
      bytes = read_file(lc.path);
    } catch (const std::runtime_error& e) {
      throw std::runtime_error(fmt::format("rank {}: {}", s.rank->rank, e.what()));
    }
    lc.state = decode_checkpoint(bytes, lc.path.string());
    if (lc.state.config_hash != s.hash || lc.state.params.size() != s.backend->n_params())
      throw std::runtime_error(fmt::format("rank {}: {} is not this run's checkpoint", s.rank->rank, rv.checkpoint));
    s.checkpoint = std::move(lc);
  }
  s.backend->connect_ranks(rv.nccl_id, s.rank->world, s.rank->rank, timeout);
  TrainLog log(std::filesystem::path(), false);
  Heartbeat heartbeat(std::filesystem::path(), o.heartbeat_interval_s);
  return run_loop(s, o, paths, log, heartbeat);
}

}  // namespace

RunConfig planned_config(const TrainOptions& o) { return planned(o, nullptr); }

TrainResult train(const TrainOptions& o) {
  // A first SIGTERM/SIGINT finishes the step and checkpoints; a second one kills at once.
  const StopSignals signals(StopSignals::Second::kills);
  const RunPaths paths(o.dir);
  Setup s;

  // ---- Input checks: nothing is written into the directory until all of them pass.
  s.config = planned(o, &s.device_choice);
  if (s.config.gpus > 1 && !o.rank)
    throw std::logic_error("train(): a run on several GPUs is started rank by rank (launch_ranks)");
  s.rank = o.rank;
#ifdef FP4LAB_HAVE_CUDA
  if (s.rank) cuda_model::select_cuda_device(s.rank->local_rank);  // before the run's first CUDA call
#endif
  s.hash = config_hash(s.config);
  if (!s.writer()) return train_follower(s, o);
  const std::string dir = o.dir.string();
  // Lock the directory before reading anything in it, so what we read (status, checkpoints) cannot
  // change under us. With --resume the directory may be created for that (an orchestrator always
  // passes --resume); a fresh run's directory is locked once it exists (nobody else can be using a
  // directory that did not exist).
  std::optional<DirectoryLock> lock;
  if (o.resume) {
    std::error_code ec;
    std::filesystem::create_directories(o.dir, ec);
    if (ec) throw UserError("cannot create --dir " + dir + ": " + ec.message());
  }
  if (std::filesystem::is_directory(o.dir)) lock.emplace(o.dir);
  if (!o.resume && holds_a_run(paths))
    throw UserError(dir + " already holds a run: pass --resume to continue it, or choose a new --dir");
  if (o.resume && std::filesystem::exists(paths.config)) {
    std::string theirs;
    try {
      const RunConfig run = load_config(paths.config);
      refuse_other_gpus(run.gpus, s.config.gpus, dir);
      theirs = config_hash(run);
    } catch (const UserError& e) {
      const std::string what = e.what();
      throw UserError(what.rfind("cannot resume", 0) == 0 ? what : "cannot resume: " + what);
    }
    if (theirs != s.hash)
      throw UserError("cannot resume " + dir + ": " + o.config.string() +
                      " differs from the run's config.json: resume with " + paths.config.string() +
                      " or choose a new --dir");
  }
  if (o.resume) {
    // A run with an outcome is finished: resuming it again repeats the outcome, not the run.
    const json status = read_status(paths.status);
    const std::string state = status.is_object() && status.contains("state") && status["state"].is_string()
                                  ? status["state"].get<std::string>()
                                  : std::string();
    if (state == "succeeded" || state == "diverged") {
      TrainLog log(paths.log, o.echo);
      log.line("nothing to do: the run already " + state);
      // The other ranks learn it from the rendezvous (no NCCL id) and report the same.
      if (s.rank && s.rank->world > 1) write_rendezvous(o.dir, Rendezvous{s.rank->token, "", ""});
      return result_from_status(status, s.config);
    }
  }
  open_run(s);
  if (o.resume) {
    try {
      s.checkpoint = load_latest_checkpoint(paths.checkpoints);
    } catch (const CheckpointError& e) {
      throw UserError(std::string("cannot resume: ") + e.what() + "; remove " +
                      paths.checkpoints.string() + " to start over");
    }
    if (s.checkpoint) {
      const CheckpointState& st = s.checkpoint->state;
      const std::string name = s.checkpoint->path.string();
      if (st.config_hash != s.hash)
        throw UserError("cannot resume: " + name + " was written by a different config (hash " +
                        st.config_hash.substr(0, 12) + ", this config " + s.hash.substr(0, 12) +
                        "): resume with the run's own config.json or choose a new --dir");
      const std::string fp = st.extra.is_object() && st.extra.contains("data_fingerprint") &&
                                     st.extra["data_fingerprint"].is_string()
                                 ? st.extra["data_fingerprint"].get<std::string>()
                                 : std::string();
      if (fp != s.data->fingerprint())
        throw UserError("cannot resume: " + name + " was written against other data (fingerprint " +
                        fp.substr(0, 12) + ", \"" + s.config.data + "\" is " +
                        s.data->fingerprint().substr(0, 12) + ")");
      const int their_gpus = st.extra.is_object() && st.extra.contains("gpus") && st.extra["gpus"].is_number_integer()
                                 ? st.extra["gpus"].get<int>()
                                 : 1;  // written before multi-GPU runs existed
      refuse_other_gpus(their_gpus, s.config.gpus, name);
      // A run continued under other numerics would hold two identities' bits in one curve.
      // Checkpoints written before runs recorded an identity carry none and resume as before.
      const int numerics = s.backend->numerics();
      if (st.extra.is_object() && st.extra.contains("numerics") && st.extra["numerics"] != numerics)
        throw UserError(fmt::format("cannot resume: {} was written under numerics identity {}, this run's is {} "
                                    "(docs/train.md \"Numerics identity\"): resume with a build of identity {} (and "
                                    "FP4LAB_MOE_GROUPED_WGRAD as it was), or remove {} to start over",
                                    name, st.extra["numerics"].dump(), numerics, st.extra["numerics"].dump(),
                                    paths.checkpoints.string()));
      if (st.params.size() != s.backend->n_params())
        throw UserError(fmt::format("cannot resume: {} holds {} parameters, the model has {}", name,
                                    st.params.size(), s.backend->n_params()));
      if (st.step > s.config.train.steps)
        throw UserError(fmt::format("cannot resume: {} is at step {}, beyond train.steps = {}", name,
                                    st.step, s.config.train.steps));
    }
  }

  // ---- The run: from here on a failure is the run's, recorded in status.json.
  try {
    std::filesystem::create_directories(o.dir);
  } catch (const std::filesystem::filesystem_error& e) {
    throw UserError("cannot create --dir " + dir + ": " + e.code().message());
  }
  if (!lock) lock.emplace(o.dir);
  if (!std::filesystem::exists(paths.config)) {
    const std::string text = config_to_json(s.config).dump(2) + "\n";
    write_file_atomic(paths.config, {text});
  }
  TrainLog log(paths.log, o.echo);
  if (s.checkpoint)
    for (const std::string& w : s.checkpoint->warnings) log.warn(w);
  std::error_code ec;
  std::filesystem::remove(paths.status, ec);  // a failed attempt's status: this attempt decides anew
  try {
    Heartbeat heartbeat(paths.heartbeat, o.heartbeat_interval_s);
    if (s.rank) {
      // Rank 0 draws the communicator's id and, every check passed, tells the other ranks where to
      // find the run (rendezvous), then waits for them to join.
      const double timeout = rank_timeout_s();
#ifdef FP4LAB_HAVE_CUDA
      const std::string id = cuda_model::nccl_unique_id();
#else
      const std::string id;  // unreachable: planned() refuses ranks without CUDA
#endif
      if (s.rank->world > 1)
        write_rendezvous(o.dir, Rendezvous{s.rank->token, id,
                                           s.checkpoint ? std::filesystem::absolute(s.checkpoint->path).string() : ""});
      log.line(fmt::format("rank 0 of {}: waiting for the other ranks to join (NCCL)", s.rank->world));
      s.backend->connect_ranks(id, s.rank->world, 0, timeout);
    }
    return run_loop(s, o, paths, log, heartbeat);
  } catch (const std::exception& e) {
    try {
      write_status(paths.status, {{"state", "failed"}, {"error", e.what()}});
      log.line(std::string("failed: ") + e.what());
    } catch (const std::exception&) {
      // The original error is the one to report.
    }
    throw std::runtime_error(e.what());
  }
}

}  // namespace fp4::run
