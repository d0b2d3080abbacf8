// config.h — one training run, described by one JSON document (docs/train.md has the schema).
//
// A config is read, validated and resolved in one pass: every field the file leaves out gets its
// default written in, so config_to_json() of the result says everything the run depends on and
// reading that back gives the same config (resolution is idempotent). Its canonical dump (sorted
// keys, shortest round-trip numbers) hashed with SHA-256 identifies the run: a checkpoint records
// the hash and a resume with any other config is refused.
//
// Errors are the user's: each is a UserError with one line that starts with the file
// name and names the field, e.g. "run.json: train.lr must be > 0, got -1".
#pragma once

#include <cstdint>
#include <filesystem>
#include <string>

#include <nlohmann/json.hpp>

#include "engine/data/data_source.h"
#include "engine/model/model_shape.h"
#include "engine/recipe.h"

namespace fp4::run {

// The config's "model" section: a size preset's name, the dimensions it resolves to (the model's
// shape, engine/model/model_shape.h, less the vocabulary, which the data sets) and the context.
struct ModelConfig {
  std::string preset = "custom";  // "d<L>" fixes n_layers = L, d_model = 64·L, "d<L>-e<E>k<K>" adds
                                  // an MoE block (E experts, top-K) to every layer; "custom" otherwise
  int n_layers = 0;
  int d_model = 0;
  int n_heads = 0;                // default d_model / head_dim
  int head_dim = 64;
  int d_ff = 0;                   // default: the multiple of 64 nearest 8/3 · d_model (SwiGLU)
  int seq_len = 256;
  // "model.moe" (docs/model.md, "Mixture of experts"): n_experts = 0 (the section absent) is the
  // dense model, and then nothing of it is written into the config's JSON, so every dense run's id
  // is what it was before MoE existed.
  model::MoeShape moe;

  // The model's shape over a vocabulary of `vocab_size` tokens: the one way from a run config to
  // the engine's model.
  model::ModelShape shape(int vocab_size) const;
};

enum class Schedule : uint8_t { cosine = 0, wsd = 1 };
const char* schedule_name(Schedule s);

// The order in which the training stream reads the data (docs/train.md, docs/data.md).
//   sequences: every epoch is a seeded permutation of the shard directory's seq_len-token windows,
//              so any prefix of the stream is a fair sample of the corpus (the default for shards);
//   none:      the documents in file order (synthetic sources, whose stream is already a draw
//              from one fixed process, and reproductions of runs made before the shuffle).
enum class Shuffle : uint8_t { none = 0, sequences = 1 };
const char* shuffle_name(Shuffle s);

struct TrainConfig {
  uint64_t seed = 0;
  int64_t tokens = 0;             // total training tokens = steps · batch_tokens (resolved)
  int64_t steps = 0;              // optimizer steps
  int64_t batch_tokens = 16384;   // tokens per optimizer step
  int micro_batch = 8;            // sequences per micro-step
  double lr = 1e-3;               // peak learning rate
  double min_lr = 0.0;            // floor; default lr / 10 (to 15 significant digits)
  int64_t warmup_steps = 0;       // default steps / 20
  Schedule schedule = Schedule::cosine;
  double decay_fraction = 0.2;    // wsd only: the last fraction of steps decays linearly
  double beta1 = 0.9;
  double beta2 = 0.95;
  double eps = 1e-8;
  double weight_decay = 0.1;      // decoupled (AdamW), not applied to norm gains
  double grad_clip = 1.0;         // global-norm clip; 0 turns it off
  Shuffle shuffle = Shuffle::sequences;  // default: sequences for a shard directory, none for synthetic
  uint64_t data_seed = 0;         // sequences only: the permutation's seed; default train.seed
};

struct EvalConfig {
  int64_t every = 250;            // steps between evaluations (0: only at the start and the end)
  int64_t tokens = 65536;         // size of the fixed held-out set, a multiple of model.seq_len
};

struct ProbeConfig {
  int64_t every = 0;              // steps between shrinkage probes (0: off)
};

struct CheckpointConfig {
  int64_t every = 500;            // steps between checkpoints (0: only at the end and on a signal)
};

struct RunConfig {
  ModelConfig model;
  engine::Recipe recipe;          // default the bf16 preset
  std::string data;               // a shard directory or "synthetic:..."
  TrainConfig train;
  EvalConfig eval;
  ProbeConfig probe;
  CheckpointConfig checkpoint;
  std::string device = "cpu";
  std::string storage = "bf16";
  // Data parallelism: the number of GPUs of one host the run trains on, one rank process each
  // (docs/train.md, "Several GPUs"). Part of the run's identity only when it is not 1 (the
  // all-reduce's summation order makes other N other bits), so every run id made before the field
  // existed is unchanged: config_to_json writes "gpus" only when it is not 1.
  int gpus = 1;
  // Whether the source named "device" (set by config_from_json; not part of the JSON form, so not
  // of the hash): when it did not, the trainer picks one (run::pick_device).
  bool device_named = false;

  int64_t tokens_per_micro_step() const {
    return static_cast<int64_t>(train.micro_batch) * model.seq_len;
  }
  // Micro-steps per optimizer step (gradient accumulation); resolution makes it exact.
  int64_t grad_accum() const { return train.batch_tokens / tokens_per_micro_step(); }
};

// The order the trainer reads the training stream in (train.shuffle, train.data_seed, model.seq_len).
data::StreamOrder train_stream_order(const RunConfig& c);

// Empty when `device` names a device at all ("cpu" or "cuda"); otherwise the one-line reason,
// "device must be \"cpu\" or \"cuda\", got \"tpu\"". A config is read with this check only, so that
// a build without CUDA still plans, reports and fits a study that was trained on GPUs.
std::string device_name_error(const std::string& device);
// Empty when `device` can train in this build; otherwise the one-line reason: device_name_error's,
// or for "cuda" in a build without CUDA "device \"cuda\": this fp4lab was built without CUDA; ...".
// The trainer and `sweep run` check it before anything starts.
std::string device_error(const std::string& device);
// Sets c.device (part of the config and its hash) after checking it; `where` starts the message
// ("--device"). Throws UserError.
void set_device(RunConfig& c, const std::string& device, const std::string& where);

// The most GPUs a run may name: far beyond any one host, refused as a typo.
constexpr int kMaxGpus = 1024;
// Empty when `gpus` GPUs can train config `c` as far as the config can tell (N >= 1, device
// "cuda" when N > 1, and the micro-steps of one optimizer step a multiple of N, so that every rank
// takes whole micro-batches); otherwise the one-line reason, without the file name.
std::string gpus_error(const RunConfig& c, int64_t gpus);
// Sets c.gpus after gpus_error's checks; `where` starts the message ("--gpus"). Throws UserError.
void set_gpus(RunConfig& c, int64_t gpus, const std::string& where);

// Parses, validates and resolves. `file` names the source in messages ("run.json").
RunConfig config_from_json(const nlohmann::json& j, const std::string& file);
// As above from text; malformed JSON is reported as "file:line:col: malformed JSON: ...".
RunConfig config_from_text(const std::string& text, const std::string& file);
// Reads the file; an unreadable file is a UserError naming it.
RunConfig load_config(const std::filesystem::path& path);

// What a sweep learns about the data a config names before any run starts: its vocabulary (the
// parameter counts need it) and the sizes of its splits.
struct DataFacts {
  uint32_t vocab_size = 256;
  uint64_t train_tokens = 0;       // 0: endless (synthetic) or not known (not opened)
  uint64_t validation_tokens = 0;  // the same
  bool opened = false;             // the source was opened as the trainer will open it
};
// `data` as a config holds it, a relative shard directory resolved against `base_dir`. With
// `must_open` the source is opened as the trainer opens it (a synthetic spec parsed; a shard
// directory's manifest read and every shard mapped and checked), and anything wrong with it is a
// UserError saying what. Without, a shard directory that has not been built yet (no manifest.json)
// counts as the byte tokenizer's (vocabulary 256, sizes unknown), so that a study can be planned
// before its data exists; one that has been built is opened as above.
DataFacts inspect_data(const std::string& data, const std::filesystem::path& base_dir, bool must_open);

// The fully resolved form: every field, defaults included.
nlohmann::json config_to_json(const RunConfig& c);
// Sorted keys, no whitespace: the bytes that are hashed.
std::string config_canonical(const RunConfig& c);
// SHA-256 of config_canonical, 64 hex digits.
std::string config_hash(const RunConfig& c);

// A preset name a run config accepts: "d<L>" with L from 1 to 64, optionally "-e<E>k<K>" (engine/model's
// model_preset gives its dimensions). Throws UserError for anything else.
void check_model_preset(const std::string& preset);
// engine/model's rule: the multiple of 64 nearest to 8/3 · d_model.
int default_d_ff(int d_model);

}  // namespace fp4::run
