// byte_shard_builder.cpp — one pass over the inputs: split into documents, route each to its
// split, cut the splits' token streams into shards, then write the manifest.
#include "engine/data/byte_shard_builder.h"

#include <algorithm>
#include <cstdio>
#include <regex>
#include <stdexcept>
#include <string_view>
#include <system_error>

#include "base/files.h"
#include "base/sha256.h"
#include "base/user_error.h"
#include "engine/data/document_splitter.h"
#include "engine/data/shard.h"
#include "engine/data/text_input.h"

namespace fp4::data {
namespace {

namespace fs = std::filesystem;

constexpr uint32_t kByteVocab = 256;
constexpr size_t kReadChunk = 1 << 20;
constexpr uint64_t kProgressEvery = 16ull << 20;

// One split's token stream, cut into shards of at most shard_tokens tokens as it grows.
class SplitWriter {
 public:
  SplitWriter(fs::path dir, bool validation, uint64_t shard_tokens)
      : dir_(std::move(dir)), validation_(validation), shard_tokens_(shard_tokens) {}

  void append(std::string_view bytes) {
    while (!bytes.empty()) {
      size_t room = static_cast<size_t>(shard_tokens_ - buffer_.size());
      size_t take = bytes.size() < room ? bytes.size() : room;
      for (size_t i = 0; i < take; ++i) buffer_.push_back(static_cast<unsigned char>(bytes[i]));
      bytes.remove_prefix(take);
      if (buffer_.size() == shard_tokens_) flush();
    }
  }

  void finish() {
    if (!buffer_.empty()) flush();
  }

  SplitSummary& summary() { return summary_; }

 private:
  void flush() {
    std::string name = shard_file_name(validation_, summary_.shards.size());
    std::string sha = write_shard(dir_ / name, buffer_, kByteVocab);
    summary_.shards.push_back(ShardEntry{name, buffer_.size(), sha});
    summary_.tokens += buffer_.size();
    buffer_.clear();
  }

  fs::path dir_;
  bool validation_;
  uint64_t shard_tokens_;
  std::vector<uint16_t> buffer_;
  SplitSummary summary_;
};

bool is_our_file(const std::string& name) {
  // Shards, and the temporary files write_file_atomic leaves if killed mid-write.
  static const std::regex ours(R"(\.?(train|val)_[0-9]{3,}\.bin(\.tmp)?|\.manifest\.json\.tmp)");
  return std::regex_match(name, ours);
}

// The parts of a manifest that decide its content: equal identities mean an identical build.
bool same_build(const Manifest& old, const Manifest& wanted) {
  if (old.tokenizer != wanted.tokenizer || old.separator != wanted.separator ||
      old.validation_every != wanted.validation_every || old.shard_tokens != wanted.shard_tokens ||
      old.inputs.size() != wanted.inputs.size())
    return false;
  for (size_t i = 0; i < old.inputs.size(); ++i) {
    if (old.inputs[i].name != wanted.inputs[i].name || old.inputs[i].sha256 != wanted.inputs[i].sha256) return false;
  }
  return true;
}

bool shards_present(const fs::path& dir, const Manifest& m) {
  for (const SplitSummary* s : {&m.train, &m.validation}) {
    for (const ShardEntry& e : s->shards) {
      std::error_code ec;
      uint64_t size = fs::file_size(dir / e.file, ec);
      if (ec || size != kShardHeaderBytes + 2 * e.tokens) return false;
    }
  }
  return true;
}

// Decides what may happen in the output directory. Returns the previous manifest when it already
// describes this exact build.
std::optional<Manifest> prepare_out_dir(const fs::path& dir, const Manifest& wanted) {
  std::error_code ec;
  if (!fs::exists(dir, ec)) {
    fs::create_directories(dir, ec);
    if (ec) throw UserError(dir.string() + ": cannot create the output directory: " + ec.message());
    return std::nullopt;
  }
  if (!fs::is_directory(dir, ec)) throw UserError(dir.string() + ": exists and is not a directory; choose another --out");
  if (fs::exists(dir / kManifestName, ec)) {
    Manifest old;
    try {
      old = read_manifest(dir);
    } catch (const UserError&) {
      throw UserError(dir.string() + ": holds a manifest.json this build cannot read; remove the directory or choose another --out");
    }
    if (same_build(old, wanted) && shards_present(dir, old)) return old;
    throw UserError(dir.string() + ": already holds a different build (other inputs or settings); choose "
                    "another --out directory or remove this one");
  }
  for (const fs::directory_entry& e : fs::directory_iterator(dir)) {
    std::string name = e.path().filename().string();
    if (!is_our_file(name))
      throw UserError(dir.string() + ": is not empty (it holds " + name +
                      "); give a new or empty directory to --out");
  }
  return std::nullopt;  // empty, or the leftovers of an interrupted build: they get replaced
}

// Removes shard files an interrupted earlier build left beyond what this build wrote.
void remove_stale(const fs::path& dir, const Manifest& m) {
  std::vector<std::string> keep;
  for (const SplitSummary* s : {&m.train, &m.validation})
    for (const ShardEntry& e : s->shards) keep.push_back(e.file);
  for (const fs::directory_entry& e : fs::directory_iterator(dir)) {
    std::string name = e.path().filename().string();
    if (is_our_file(name) && std::find(keep.begin(), keep.end(), name) == keep.end()) {
      std::error_code ec;
      fs::remove(e.path(), ec);
    }
  }
}

void check_options(const ByteBuildOptions& o) {
  if (o.inputs.empty()) throw UserError("data build: no input files; give one or more .txt or .txt.xz files");
  if (o.out_dir.empty()) throw UserError("data build: no output directory; give --out DIR");
  if (o.shard_tokens == 0 || o.shard_tokens > kMaxShardTokens)
    throw UserError("data build: --shard-tokens " + std::to_string(o.shard_tokens) + " is outside 1.." +
                    std::to_string(kMaxShardTokens) + " (a shard's token count is an int32)");
  if (o.validation_every == 0) throw UserError("data build: --val-every must be at least 1");
}

}  // namespace

std::string shard_file_name(bool validation, size_t index) {
  char buf[48];
  std::snprintf(buf, sizeof buf, "%s_%03zu.bin", validation ? "val" : "train", index);
  return buf;
}

BuildResult build_byte_shards(const ByteBuildOptions& options, const std::function<void(const BuildProgress&)>& progress) {
  check_options(options);
  Manifest m;
  m.tokenizer = "bytes";
  m.vocab_size = kByteVocab;
  m.separator = kDocumentSeparator;
  m.validation_every = options.validation_every;
  m.shard_tokens = options.shard_tokens;
  // Hash the inputs first: it checks they all exist before anything is written, and the hashes
  // decide whether an existing build is this one.
  for (const fs::path& p : options.inputs) {
    check_text_input_name(p);
    InputEntry in;
    in.name = p.filename().string();
    in.sha256 = sha256_file(p);
    std::error_code ec;
    in.bytes = fs::file_size(p, ec);
    m.inputs.push_back(std::move(in));
  }
  if (std::optional<Manifest> old = prepare_out_dir(options.out_dir, m)) return BuildResult{*old, true};

  SplitWriter train(options.out_dir, false, options.shard_tokens);
  SplitWriter val(options.out_dir, true, options.shard_tokens);
  std::vector<char> chunk(kReadChunk);
  uint64_t all_bytes = 0;
  for (size_t i = 0; i < options.inputs.size(); ++i) {
    InputEntry& in = m.inputs[i];
    TextInput text(options.inputs[i]);
    Sha256 text_hash;
    uint64_t doc = 1;  // number of the current document within this file
    auto current = [&]() -> SplitWriter& { return doc % options.validation_every == 0 ? val : train; };
    auto summary = [&]() -> SplitSummary& { return current().summary(); };
    DocumentSplitter splitter(
        kDocumentSeparator,
        [&](std::string_view bytes) {
          current().append(bytes);
          summary().document_bytes += bytes.size();
          if (doc % options.validation_every == 0) in.validation_document_bytes += bytes.size();
        },
        [&]() {
          current().append(kDocumentSeparator);
          summary().documents += 1;
          if (doc % options.validation_every == 0) in.validation_documents += 1;
          in.documents += 1;
          doc += 1;
        });
    BuildProgress report{i, options.inputs.size(), in.name, 0, text.text_size(), all_bytes, false};
    uint64_t next_report = kProgressEvery;
    size_t n;
    while ((n = text.read(chunk.data(), chunk.size())) > 0) {
      std::string_view bytes(chunk.data(), n);
      text_hash.update(bytes);
      splitter.feed(bytes);
      in.text_bytes += n;
      all_bytes += n;
      if (progress && in.text_bytes >= next_report) {
        report.text_bytes = in.text_bytes;
        report.all_text_bytes = all_bytes;
        progress(report);
        next_report = in.text_bytes + kProgressEvery;
      }
    }
    splitter.finish();
    in.text_sha256 = text_hash.hex();
    if (progress) {
      report.text_bytes = in.text_bytes;
      report.all_text_bytes = all_bytes;
      report.input_done = true;
      progress(report);
    }
  }
  train.finish();
  val.finish();
  m.train = train.summary();
  m.validation = val.summary();
  const std::string bytes = manifest_bytes(m);
  write_file_atomic(options.out_dir / kManifestName, {bytes});
  remove_stale(options.out_dir, m);
  return BuildResult{m, false};
}

}  // namespace fp4::data
