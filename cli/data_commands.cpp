// data_commands.cpp — `fp4lab data build|entropy|info`: argument wiring and printing; the work is
// done by engine/data.
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include <fmt/core.h>
#include <nlohmann/json.hpp>

#include "base/user_error.h"
#include "cli/commands.h"
#include "cli/number_options.h"
#include "engine/data/byte_shard_builder.h"
#include "engine/data/data_source.h"
#include "engine/data/manifest.h"
#include "engine/data/markov_chain.h"
#include "engine/data/shard.h"
#include "engine/data/shard_source.h"
#include "engine/data/synthetic_spec.h"

namespace fp4::cli {
namespace {

namespace data = fp4::data;

constexpr double kLn2 = 0.69314718055994530942;

std::string megabytes(uint64_t bytes) { return fmt::format("{:.1f} MB", static_cast<double>(bytes) / 1e6); }

// Progress on stderr: one rewritten line on a terminal, plain lines otherwise (logs, CI).
class BuildProgressPrinter {
 public:
  BuildProgressPrinter() : tty_(::isatty(2) == 1) {}

  void operator()(const data::BuildProgress& p) {
    std::string line = fmt::format("data build: [{}/{}] {}: {} of text", p.input + 1, p.inputs, p.name, megabytes(p.text_bytes));
    if (p.text_bytes_total && *p.text_bytes_total > 0)
      line += fmt::format(" ({:.0f}%)", 100.0 * static_cast<double>(p.text_bytes) / static_cast<double>(*p.text_bytes_total));
    if (p.input_done) line += ", done";
    if (tty_) {
      std::fprintf(stderr, "\r%-78s", line.c_str());
      if (p.input_done) std::fputc('\n', stderr);
    } else {
      std::fprintf(stderr, "%s\n", line.c_str());
    }
    std::fflush(stderr);
  }

 private:
  bool tty_;
};

std::string split_line(const data::SplitSummary& s) {
  return fmt::format("{} tokens in {} shard{} ({} documents, {} document bytes)", s.tokens, s.shards.size(),
                     s.shards.size() == 1 ? "" : "s", s.documents, s.document_bytes);
}

void run_build(const std::string& tokenizer, const std::vector<std::string>& files, const std::string& out,
               uint64_t shard_tokens, uint64_t every) {
  if (tokenizer != "bytes")
    throw UserError("data build: tokenizer \"" + tokenizer + "\" is not known; the only one is bytes");
  data::ByteBuildOptions options;
  for (const std::string& f : files) options.inputs.emplace_back(f);
  options.out_dir = out;
  options.shard_tokens = shard_tokens;
  options.validation_every = every;
  BuildProgressPrinter printer;
  data::BuildResult result = data::build_byte_shards(options, std::ref(printer));
  const data::Manifest& m = result.manifest;
  fmt::print("{} {}\n", out, result.up_to_date ? "is up to date (same inputs and settings); nothing written" : "written");
  fmt::print("  train       {}\n", split_line(m.train));
  fmt::print("  validation  {}\n", split_line(m.validation));
  if (m.validation.tokens == 0)
    std::fprintf(stderr, "data build: warning: no validation documents: no input has %llu documents; "
                 "use --val-every to hold out more often\n", static_cast<unsigned long long>(every));
}

void print_entropy_line(const char* label, double nats, const char* note = "") {
  fmt::print("{:<17}{:.9f} nats/token  {:.9f} bits/token{}\n", label, nats, nats / kLn2, note);
}

void run_entropy(const std::string& source, uint64_t seq_len, bool json) {
  nlohmann::json j;
  if (data::is_synthetic_spec(source)) {
    data::MarkovParams params = data::parse_synthetic_spec(source);
    std::string spec = data::canonical_synthetic_spec(params);
    data::MarkovChain chain(params);
    data::MarkovEntropies e;
    try {
      e = chain.entropies();
    } catch (const UserError& err) {
      throw UserError("synthetic source \"" + source + "\": " + err.what());
    }
    if (json) {
      j = {{"source", spec}, {"entropy_rate_nats", e.rate}, {"entropy_rate_bits", e.rate / kLn2},
           {"unigram_entropy_nats", e.unigram}, {"unigram_entropy_bits", e.unigram / kLn2},
           {"power_iterations", e.iterations}, {"residual", e.residual}};
      if (seq_len > 0) {
        j["seq_len"] = seq_len;
        j["window_floor_nats"] = e.window_floor(seq_len);
      }
      fmt::print("{}\n", j.dump(2));
      return;
    }
    fmt::print("source           {}\n", spec);
    print_entropy_line("entropy rate", e.rate);
    print_entropy_line("unigram entropy", e.unigram);
    if (seq_len > 0)
      print_entropy_line(fmt::format("floor at T={}", seq_len).c_str(), e.window_floor(seq_len),
                         "  (best mean loss when each sequence sees only its own tokens)");
    fmt::print("stationary       {} contexts, {} power iterations, residual {:.1e}\n", chain.contexts(),
               e.iterations, e.residual);
    return;
  }
  // A shard directory: only the empirical unigram entropy of its training split is known.
  std::vector<uint64_t> counts = data::count_train_tokens(source);
  double total = 0.0;
  for (uint64_t c : counts) total += static_cast<double>(c);
  double h = 0.0;
  for (uint64_t c : counts)
    if (c > 0) h -= static_cast<double>(c) / total * std::log(static_cast<double>(c) / total);
  if (json) {
    j = {{"source", source}, {"entropy_rate_nats", nullptr}, {"unigram_entropy_nats", h},
         {"unigram_entropy_bits", h / kLn2}, {"train_tokens", static_cast<uint64_t>(total)}};
    fmt::print("{}\n", j.dump(2));
    return;
  }
  fmt::print("source           {}\n", source);
  fmt::print("{:<17}unknown (a known entropy rate exists only for synthetic sources)\n", "entropy rate");
  print_entropy_line("unigram entropy", h, fmt::format("  (empirical, {} training tokens)", static_cast<uint64_t>(total)).c_str());
}

void run_info(const std::string& source, bool verify) {
  std::unique_ptr<data::DataSource> src = data::open_data(source);
  fmt::print("source       {}\n", src->spec());
  fmt::print("fingerprint  {}\n", src->fingerprint());
  fmt::print("vocabulary   {}\n", src->vocab_size());
  if (data::is_synthetic_spec(source)) {
    fmt::print("train        endless stream\n");
    fmt::print("validation   endless held-out stream (the first N tokens are used)\n");
    return;
  }
  data::Manifest m = data::read_manifest(source);
  fmt::print("tokenizer    {}\n", m.tokenizer);
  fmt::print("train        {}\n", split_line(m.train));
  fmt::print("validation   {}\n", split_line(m.validation));
  fmt::print("split        {}\n", data::split_rule_text(m.validation_every));
  for (const data::InputEntry& in : m.inputs)
    fmt::print("input        {} ({} documents, {} text bytes, sha256 {})\n", in.name, in.documents, in.text_bytes, in.sha256);
  if (verify) {
    data::verify_shard_directory(source);
    fmt::print("verified     every shard matches its sha256 in manifest.json\n");
  }
}

}  // namespace

void register_data_commands(CLI::App& app) {
  CLI::App* cmd = app.add_subcommand("data", "token data: build byte-level shards from text, inspect data sources");
  cmd->require_subcommand(1);

  struct BuildArgs {
    std::string tokenizer;
    std::vector<std::string> files;
    std::string out;
    uint64_t shard_tokens = data::kDefaultShardTokens;
    uint64_t every = data::kDefaultValidationEvery;
  };
  auto b = std::make_shared<BuildArgs>();
  CLI::App* build = cmd->add_subcommand(
      "build", "text files (.txt or .txt.xz) to token shards plus manifest.json, with the fixed train/validation split");
  build->add_option("--tokenizer", b->tokenizer, "tokenizer: bytes (one token per byte, vocabulary 256)")->required();
  build->add_option("files", b->files, "input text files, in stream order (.xz is decompressed with xz)")->required();
  build->add_option("--out", b->out, "output directory (new or empty)")->required();
  build->add_option("--shard-tokens", b->shard_tokens, "tokens per shard (default 100000000)")
      ->check(whole_number(1, static_cast<int64_t>(data::kMaxShardTokens)));
  build->add_option("--val-every", b->every, "document n of a file is validation if n % this == 0 (default 100)")
      ->check(whole_number(1));
  build->callback([b] { run_build(b->tokenizer, b->files, b->out, b->shard_tokens, b->every); });

  struct EntropyArgs {
    std::string source;
    uint64_t seq_len = 0;
    bool json = false;
  };
  auto e = std::make_shared<EntropyArgs>();
  CLI::App* entropy = cmd->add_subcommand(
      "entropy", "entropy rate and unigram entropy of a synthetic source (empirical unigram for a shard directory)");
  entropy->add_option("source", e->source, "synthetic:markov?order=..&vocab=..&branch=..&alpha=..&seed=.. or a shard directory")
      ->required();
  entropy->add_option("--seq-len", e->seq_len, "also print the loss floor of a model seeing sequences of this length")
      ->check(whole_number(1, 1 << 24));
  entropy->add_flag("--json", e->json, "print JSON");
  entropy->callback([e] { run_entropy(e->source, e->seq_len, e->json); });

  struct InfoArgs {
    std::string source;
    bool verify = false;
  };
  auto i = std::make_shared<InfoArgs>();
  CLI::App* info = cmd->add_subcommand("info", "what a data source holds: vocabulary, splits, inputs, fingerprint");
  info->add_option("source", i->source, "a shard directory or synthetic:...")->required();
  info->add_flag("--verify", i->verify, "re-hash every shard against manifest.json");
  info->callback([i] { run_info(i->source, i->verify); });
}

}  // namespace fp4::cli
