// shard.cpp — encoding, checking, writing and reading llm.c-layout token shards.
#include "engine/data/shard.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <bit>
#include <cerrno>
#include <cstring>
#include <stdexcept>
#include <string_view>

#include "base/files.h"
#include "base/sha256.h"
#include "base/user_error.h"

namespace fp4::data {

// Tokens are stored and mapped as native uint16; the format is little-endian, and every machine
// fp4lab targets (x86-64, aarch64, the GPUs) is too.
static_assert(std::endian::native == std::endian::little, "shards are little-endian; add byte swapping");

namespace {

[[noreturn]] void refuse(const std::filesystem::path& path, const std::string& what) {
  throw UserError(path.string() + ": " + what);
}

const char* kRebuild = "rebuild it with `fp4lab data build`";

int32_t word_at(const unsigned char* header, size_t i) {
  uint32_t u = uint32_t(header[4 * i]) | uint32_t(header[4 * i + 1]) << 8 | uint32_t(header[4 * i + 2]) << 16 |
               uint32_t(header[4 * i + 3]) << 24;
  return static_cast<int32_t>(u);
}

void check_token_range(const std::filesystem::path& path, std::span<const uint16_t> tokens, uint32_t vocab) {
  if (vocab >= kMaxVocab) return;  // every uint16 is a valid token
  for (size_t i = 0; i < tokens.size(); ++i) {
    if (tokens[i] >= vocab)
      refuse(path, "token " + std::to_string(i) + " is " + std::to_string(tokens[i]) +
                       ", not below the vocabulary size " + std::to_string(vocab) +
                       " in header word 3: the file is corrupt; " + kRebuild);
  }
}

struct Fd {
  int fd = -1;
  ~Fd() {
    if (fd >= 0) ::close(fd);
  }
};

// Opens `path` and checks its header; leaves the descriptor open for the caller.
ShardHeader open_and_check(const std::filesystem::path& path, Fd& fd, uint64_t& file_size) {
  fd.fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd.fd < 0) refuse(path, std::string("cannot open: ") + std::strerror(errno) + "; check the path");
  struct stat st {};
  if (::fstat(fd.fd, &st) != 0) refuse(path, std::string("cannot stat: ") + std::strerror(errno));
  if (!S_ISREG(st.st_mode)) refuse(path, "not a regular file; give a shard file (.bin)");
  file_size = static_cast<uint64_t>(st.st_size);
  unsigned char header[kShardHeaderBytes];
  size_t got = 0;
  while (got < kShardHeaderBytes && got < file_size) {
    ssize_t n = ::pread(fd.fd, header + got, kShardHeaderBytes - got, static_cast<off_t>(got));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) refuse(path, std::string("cannot read the header: ") + (n < 0 ? std::strerror(errno) : "end of file"));
    got += static_cast<size_t>(n);
  }
  return decode_shard_header(path, header, file_size);
}

}  // namespace

std::string encode_shard_header(uint64_t tokens, uint32_t vocab) {
  if (tokens > kMaxShardTokens)
    throw UserError("a shard holds at most " + std::to_string(kMaxShardTokens) + " tokens, not " +
                    std::to_string(tokens) + "; use smaller shards");
  if (vocab == 0 || vocab > kMaxVocab)
    throw UserError("vocabulary size " + std::to_string(vocab) + " is outside 1.." +
                    std::to_string(kMaxVocab));
  std::string header(kShardHeaderBytes, '\0');
  auto put = [&](size_t i, uint32_t v) {
    for (int b = 0; b < 4; ++b) header[4 * i + b] = static_cast<char>((v >> (8 * b)) & 0xff);
  };
  put(0, static_cast<uint32_t>(kShardMagic));
  put(1, static_cast<uint32_t>(kShardVersion));
  put(2, static_cast<uint32_t>(tokens));
  put(3, vocab);
  return header;
}

ShardHeader decode_shard_header(const std::filesystem::path& path, const unsigned char* header,
                                uint64_t file_size) {
  if (file_size < kShardHeaderBytes)
    refuse(path, "is " + std::to_string(file_size) + " bytes, shorter than the 1024-byte shard header: "
                 "truncated or not a token shard; " + kRebuild);
  int32_t magic = word_at(header, 0);
  if (magic != kShardMagic)
    refuse(path, "header word 0 (magic) is " + std::to_string(magic) + ", not " + std::to_string(kShardMagic) +
                     ": not a token shard in llm.c's layout; give a shard written by `fp4lab data build`");
  int32_t version = word_at(header, 1);
  if (version != kShardVersion)
    refuse(path, "header word 1 (version) is " + std::to_string(version) + ", but only version " +
                     std::to_string(kShardVersion) + " (uint16 tokens) is supported; " + kRebuild);
  int32_t count = word_at(header, 2);
  if (count < 0) refuse(path, "header word 2 (token count) is negative (" + std::to_string(count) + "); " + kRebuild);
  int32_t vocab = word_at(header, 3);
  if (vocab <= 0 || static_cast<uint32_t>(vocab) > kMaxVocab)
    refuse(path, "header word 3 (vocabulary size) is " + std::to_string(vocab) + ", not in 1.." +
                     std::to_string(kMaxVocab) + (vocab == 0 ? " (llm.c's own shards leave it 0)" : "") +
                     ": fp4lab records the vocabulary there; " + kRebuild);
  uint64_t expected = kShardHeaderBytes + 2 * static_cast<uint64_t>(count);
  if (file_size != expected)
    refuse(path, "is " + std::to_string(file_size) + " bytes but its header promises " + std::to_string(count) +
                     " tokens (" + std::to_string(expected) + " bytes)" +
                     (file_size < expected ? ": truncated, perhaps an interrupted copy; " : ": trailing bytes; ") +
                     kRebuild + " or copy it again");
  return ShardHeader{static_cast<uint64_t>(count), static_cast<uint32_t>(vocab)};
}

std::string write_shard(const std::filesystem::path& path, std::span<const uint16_t> tokens, uint32_t vocab) {
  std::string header;
  try {
    header = encode_shard_header(tokens.size(), vocab);
  } catch (const UserError& e) {
    refuse(path, e.what());
  }
  check_token_range(path, tokens, vocab);
  std::string_view body(reinterpret_cast<const char*>(tokens.data()), tokens.size_bytes());
  Sha256 h;
  h.update(header);
  h.update(body);
  write_file_atomic(path, {header, body});
  return h.hex();
}

ShardHeader read_shard_header(const std::filesystem::path& path) {
  Fd fd;
  uint64_t size = 0;
  return open_and_check(path, fd, size);
}

std::vector<uint16_t> read_shard(const std::filesystem::path& path, ShardHeader* header_out) {
  Fd fd;
  uint64_t size = 0;
  ShardHeader header = open_and_check(path, fd, size);
  std::vector<uint16_t> tokens(header.tokens);
  char* dst = reinterpret_cast<char*>(tokens.data());
  size_t want = tokens.size() * 2, got = 0;
  while (got < want) {
    ssize_t n = ::pread(fd.fd, dst + got, want - got, static_cast<off_t>(kShardHeaderBytes + got));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) refuse(path, "cannot read the tokens: " + std::string(n < 0 ? std::strerror(errno) : "file shrank"));
    got += static_cast<size_t>(n);
  }
  check_token_range(path, tokens, header.vocab);
  if (header_out) *header_out = header;
  return tokens;
}

MappedShard::MappedShard(const std::filesystem::path& path) : path_(path) {
  Fd fd;
  uint64_t size = 0;
  header_ = open_and_check(path, fd, size);
  map_size_ = static_cast<size_t>(size);
  void* p = ::mmap(nullptr, map_size_, PROT_READ, MAP_PRIVATE, fd.fd, 0);
  if (p == MAP_FAILED) throw std::runtime_error(path.string() + ": cannot map into memory: " + std::strerror(errno));
  map_ = p;
  tokens_ = reinterpret_cast<const uint16_t*>(static_cast<const char*>(p) + kShardHeaderBytes);
}

MappedShard::~MappedShard() {
  if (map_ != nullptr) ::munmap(map_, map_size_);
}

void MappedShard::check_tokens() const { check_token_range(path_, tokens(), header_.vocab); }

}  // namespace fp4::data
