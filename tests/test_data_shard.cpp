// The shard format: round trips, and every header problem refused with a message naming the file.
#include <catch2/catch.hpp>

#include <filesystem>
#include <stdexcept>
#include <string>
#include <vector>

#include "base/sha256.h"
#include "base/user_error.h"
#include "engine/data/shard.h"
#include "tests/test_support.h"

namespace fs = std::filesystem;
using namespace fp4::test;
using namespace fp4::data;

namespace {

std::vector<uint16_t> some_tokens(size_t n, uint32_t vocab) {
  std::vector<uint16_t> t(n);
  uint32_t x = 12345;
  for (size_t i = 0; i < n; ++i) {
    x = x * 1664525u + 1013904223u;
    t[i] = static_cast<uint16_t>((x >> 8) % vocab);
  }
  return t;
}

void put_word(std::string& bytes, size_t word, int32_t value) {
  uint32_t v = static_cast<uint32_t>(value);
  for (int b = 0; b < 4; ++b) bytes[4 * word + b] = static_cast<char>((v >> (8 * b)) & 0xff);
}

// The header check's message for `bytes` written as a shard file; empty if accepted.
std::string refusal(const fs::path& path, const std::string& bytes) {
  spit(path, bytes);
  try {
    read_shard_header(path);
  } catch (const fp4::UserError& e) {
    return e.what();
  }
  return "";
}

}  // namespace

TEST_CASE("a shard round-trips through write_shard, read_shard and MappedShard", "[data][shard]") {
  ScratchDir dir;
  const fs::path path = dir / "s.bin";
  std::vector<uint16_t> tokens = some_tokens(10007, 50257);
  std::string sha = write_shard(path, tokens, 50257);

  CHECK(fs::file_size(path) == 1024 + 2 * tokens.size());
  CHECK(sha == fp4::sha256_file(path));
  CHECK_FALSE(fs::exists(dir / ".s.bin.tmp"));  // the temporary file was renamed away

  ShardHeader h;
  CHECK(read_shard(path, &h) == tokens);
  CHECK(h.tokens == tokens.size());
  CHECK(h.vocab == 50257);

  // llm.c's layout: magic, version, count as little-endian int32, then fp4lab's vocabulary word.
  std::string bytes = slurp(path);
  const unsigned char* u = reinterpret_cast<const unsigned char*>(bytes.data());
  CHECK((u[0] | u[1] << 8 | u[2] << 16 | u[3] << 24) == 20240520);
  CHECK((u[4] | u[5] << 8) == 1);
  CHECK((u[8] | u[9] << 8 | u[10] << 16) == 10007);
  CHECK((u[12] | u[13] << 8 | u[14] << 16) == 50257);
  for (size_t i = 16; i < 1024; ++i) REQUIRE(u[i] == 0);
  CHECK((u[1024] | u[1025] << 8) == tokens[0]);

  MappedShard mapped(path);
  CHECK(mapped.header().tokens == tokens.size());
  CHECK(std::vector<uint16_t>(mapped.tokens().begin(), mapped.tokens().end()) == tokens);
  CHECK_NOTHROW(mapped.check_tokens());

  // Empty shards and the full uint16 range are legal.
  write_shard(dir / "empty.bin", {}, 7);
  CHECK(read_shard(dir / "empty.bin").empty());
  std::vector<uint16_t> top{0, 65535, 40000};
  write_shard(dir / "top.bin", top, 65536);
  CHECK(read_shard(dir / "top.bin") == top);
}

TEST_CASE("shard header problems are refused, each naming the file", "[data][shard]") {
  ScratchDir dir;
  const fs::path good = dir / "good.bin";
  write_shard(good, some_tokens(100, 256), 256);
  const std::string bytes = slurp(good);
  const fs::path bad = dir / "bad.bin";
  CHECK(refusal(bad, bytes).empty());

  std::string b = bytes;
  put_word(b, 0, 20240519);
  std::string msg = refusal(bad, b);
  CHECK_THAT(msg, Catch::Contains(bad.string()) && Catch::Contains("magic"));

  b = bytes;
  put_word(b, 1, 2);
  msg = refusal(bad, b);
  CHECK_THAT(msg, Catch::Contains(bad.string()) && Catch::Contains("version"));

  msg = refusal(bad, bytes.substr(0, bytes.size() - 2));
  CHECK_THAT(msg, Catch::Contains(bad.string()) && Catch::Contains("truncated"));

  msg = refusal(bad, bytes + "xy");
  CHECK_THAT(msg, Catch::Contains(bad.string()) && Catch::Contains("trailing"));

  b = bytes;
  put_word(b, 2, 101);
  msg = refusal(bad, b);
  CHECK_THAT(msg, Catch::Contains(bad.string()) && Catch::Contains("101 tokens"));

  msg = refusal(bad, bytes.substr(0, 100));
  CHECK_THAT(msg, Catch::Contains(bad.string()) && Catch::Contains("shorter than the 1024-byte"));

  b = bytes;
  put_word(b, 3, 0);  // what llm.c's own shards hold
  msg = refusal(bad, b);
  CHECK_THAT(msg, Catch::Contains(bad.string()) && Catch::Contains("word 3 (vocabulary size) is 0"));

  b = bytes;
  put_word(b, 3, 70000);
  msg = refusal(bad, b);
  CHECK_THAT(msg, Catch::Contains(bad.string()) && Catch::Contains("vocabulary size) is 70000"));

  // A token at or above the vocabulary word is caught when the tokens are read.
  b = bytes;
  put_word(b, 3, 10);
  spit(bad, b);
  CHECK_NOTHROW(read_shard_header(bad));
  try {
    read_shard(bad);
    FAIL("a token above the vocabulary was accepted");
  } catch (const fp4::UserError& e) {
    CHECK_THAT(e.what(), Catch::Contains(bad.string()) && Catch::Contains("not below the vocabulary size 10"));
  }
  CHECK_THROWS_AS(MappedShard(bad).check_tokens(), fp4::UserError);

  CHECK_THROWS_WITH(read_shard_header(dir / "missing.bin"), Catch::Contains("missing.bin"));

  // Every message is one line.
  CHECK(msg.find('\n') == std::string::npos);
}

TEST_CASE("write_shard refuses tokens outside the vocabulary and leaves nothing behind", "[data][shard]") {
  ScratchDir dir;
  std::vector<uint16_t> tokens{1, 2, 300};
  CHECK_THROWS_AS(write_shard(dir / "x.bin", tokens, 256), fp4::UserError);
  CHECK(fs::is_empty(dir.path()));
  CHECK_THROWS_AS(write_shard(dir / "x.bin", tokens, 0), fp4::UserError);
  CHECK_THROWS_AS(write_shard(dir / "x.bin", tokens, 65537), fp4::UserError);
}
