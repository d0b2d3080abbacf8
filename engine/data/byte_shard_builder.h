// byte_shard_builder.h — `fp4lab data build --tokenizer bytes`: text files to byte-level shards.
//
// The byte tokenizer maps every byte to the token of the same value (vocabulary 256). Each input
// is cut into documents at the separator "\n<|endoftext|>\n" (the corpus' delimiter, see
// shared/data/corpus/MANIFEST.md); documents of each file are numbered 1, 2, 3, ... and document
// n goes to validation iff n % every == 0 (every = 100 by default), to training otherwise. Inside
// each split's token stream every document is followed by the separator's 15 bytes, so the
// stream of a split is its documents in input order, each terminated the same way, and wrapping
// around at the end of the training stream also lands on a document boundary.
//
// Output in DIR: train_000.bin, train_001.bin, ... and val_000.bin, ... (llm.c-layout shards of at
// most `shard_tokens` tokens, see shard.h), then manifest.json (manifest.h), written last. A
// directory that already holds a manifest for the same inputs and settings is left as it is
// ("up to date"); one holding anything else is refused, except the files of an interrupted build
// of this command, which are replaced.
#pragma once

#include <cstdint>
#include <filesystem>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "engine/data/manifest.h"

namespace fp4::data {

constexpr const char* kDocumentSeparator = "\n<|endoftext|>\n";
constexpr uint64_t kDefaultShardTokens = 100'000'000;
constexpr uint64_t kDefaultValidationEvery = 100;

struct ByteBuildOptions {
  std::vector<std::filesystem::path> inputs;  // .txt (any plain text) or .txt.xz, in stream order
  std::filesystem::path out_dir;
  uint64_t shard_tokens = kDefaultShardTokens;
  uint64_t validation_every = kDefaultValidationEvery;
};

// Reported every few megabytes of text and once at the end of each input.
struct BuildProgress {
  size_t input = 0;   // 0-based index into ByteBuildOptions::inputs
  size_t inputs = 0;  // how many there are
  std::string name;
  uint64_t text_bytes = 0;                 // of this input, so far
  std::optional<uint64_t> text_bytes_total;  // known for plain text, not for .xz
  uint64_t all_text_bytes = 0;             // over all inputs so far
  bool input_done = false;
};

struct BuildResult {
  Manifest manifest;
  bool up_to_date = false;  // the directory already held this exact build; nothing was written
};

// Throws UserError (one line naming the file or option) for anything the user can fix.
BuildResult build_byte_shards(const ByteBuildOptions& options,
                              const std::function<void(const BuildProgress&)>& progress = {});

// Shard file names: "train_000.bin" / "val_000.bin", at least three digits.
std::string shard_file_name(bool validation, size_t index);

}  // namespace fp4::data
