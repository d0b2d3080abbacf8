// manifest.h — DIR/manifest.json, the description of a shard directory written by `data build`.
//
// The manifest is written last (atomically), so a directory with a manifest is a complete build.
// It lists the shards of each split in stream order with their token counts and sha256, the
// inputs with their sha256, and what a consumer needs to interpret the tokens: the tokenizer, the
// vocabulary size, the document separator inside the token stream and the split rule. All keys
// and numbers are deterministic (no time stamps, no paths beyond file names), so two builds from
// the same inputs and settings produce identical bytes.
#pragma once

#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace fp4::data {

constexpr int kManifestFormatVersion = 1;
constexpr const char* kManifestName = "manifest.json";

struct ShardEntry {
  std::string file;  // name inside the directory
  uint64_t tokens = 0;
  std::string sha256;  // of the whole file, header included
};

struct SplitSummary {
  std::vector<ShardEntry> shards;
  uint64_t tokens = 0;          // all tokens of the split, separators included
  uint64_t documents = 0;
  uint64_t document_bytes = 0;  // text bytes of the documents, separators excluded (for bits/byte)
};

struct InputEntry {
  std::string name;         // file name as given, without its directory
  std::string sha256;       // of the file as given (compressed for .xz)
  uint64_t bytes = 0;       // size of the file as given
  std::string text_sha256;  // of the text after decompression (equal to sha256 for plain text)
  uint64_t text_bytes = 0;
  uint64_t documents = 0;
  uint64_t validation_documents = 0;
  uint64_t validation_document_bytes = 0;
};

struct Manifest {
  std::string tokenizer = "bytes";
  uint32_t vocab_size = 256;
  std::string separator;            // bytes that end every document in the token stream
  uint64_t validation_every = 100;  // document n of a file is validation iff n % every == 0
  uint64_t shard_tokens = 0;        // the build's maximum tokens per shard
  std::vector<InputEntry> inputs;
  SplitSummary train, validation;

  nlohmann::json to_json() const;
  // Checks types and consistency; `where` names the file in messages (UserError).
  static Manifest from_json(const nlohmann::json& j, const std::string& where);
};

// The rule as one sentence, as it is written into the manifest.
std::string split_rule_text(uint64_t every);

// Reads and checks DIR/manifest.json (errors name the file and say what to do); `raw`, if given,
// receives the file's bytes.
Manifest read_manifest(const std::filesystem::path& dir, std::string* raw = nullptr);

// The manifest's exact bytes as written: two-space indented JSON with sorted keys and a final LF.
std::string manifest_bytes(const Manifest& m);

}  // namespace fp4::data
