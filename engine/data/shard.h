// shard.h — token shards in llm.c's layout, the one file format of fp4lab's token data.
//
//   bytes [0, 1024)   256 little-endian int32 header words:
//                       word 0  magic 20240520
//                       word 1  version 1
//                       word 2  token count n (0 <= n <= 2^31 - 1)
//                       word 3  vocabulary size V, 1..65536 (fp4lab's addition; llm.c leaves 0)
//                       words 4..255 zero
//   bytes [1024, 1024 + 2n)   n little-endian uint16 tokens, each below V
//
// The file size must be exactly 1024 + 2n. Every check failure is reported as
// UserError with one line that names the file, says what is wrong and what to do.
#pragma once

#include <cstdint>
#include <filesystem>
#include <span>
#include <string>
#include <vector>

namespace fp4::data {

constexpr int32_t kShardMagic = 20240520;
constexpr int32_t kShardVersion = 1;
constexpr size_t kShardHeaderWords = 256;
constexpr size_t kShardHeaderBytes = kShardHeaderWords * 4;
constexpr uint64_t kMaxShardTokens = 0x7fffffff;  // word 2 is an int32
constexpr uint32_t kMaxVocab = 65536;             // tokens are uint16

struct ShardHeader {
  uint64_t tokens = 0;
  uint32_t vocab = 0;
};

// The 1024 header bytes for a shard of `tokens` tokens over a vocabulary of `vocab`.
std::string encode_shard_header(uint64_t tokens, uint32_t vocab);

// Checks a header against the size of the file it came from; `path` only names it in messages.
ShardHeader decode_shard_header(const std::filesystem::path& path, const unsigned char* header,
                                uint64_t file_size);

// Writes a shard atomically (temporary file, fsync, rename). Returns the sha256 of the file's bytes.
// Throws UserError if a token is not below `vocab` or the counts are out of range.
std::string write_shard(const std::filesystem::path& path, std::span<const uint16_t> tokens, uint32_t vocab);

// Reads and checks the header only (magic, version, vocabulary word, file size).
ShardHeader read_shard_header(const std::filesystem::path& path);

// Reads a whole shard: the header checks, plus every token below the vocabulary size.
std::vector<uint16_t> read_shard(const std::filesystem::path& path, ShardHeader* header = nullptr);

// A shard mapped read-only into memory: the trainer's view of large shards without copying them.
// The header is checked on open; check_tokens() scans the tokens against the vocabulary size.
class MappedShard {
 public:
  explicit MappedShard(const std::filesystem::path& path);
  ~MappedShard();
  MappedShard(const MappedShard&) = delete;
  MappedShard& operator=(const MappedShard&) = delete;

  const std::filesystem::path& path() const { return path_; }
  const ShardHeader& header() const { return header_; }
  std::span<const uint16_t> tokens() const { return {tokens_, static_cast<size_t>(header_.tokens)}; }
  void check_tokens() const;

 private:
  std::filesystem::path path_;
  ShardHeader header_;
  void* map_ = nullptr;
  size_t map_size_ = 0;
  const uint16_t* tokens_ = nullptr;
};

}  // namespace fp4::data
