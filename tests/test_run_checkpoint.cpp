// test_run_checkpoint.cpp — checkpoint files: round trip, what the checksum catches, the newest
// two kept, the fallback to the previous one; and metrics.jsonl's repair of a torn last line.
#include <catch2/catch.hpp>

#include <cmath>
#include <cstring>

#include "engine/run/checkpoint.h"
#include "engine/run/metrics.h"
#include "tests/test_support.h"

using namespace fp4::run;
using namespace fp4::test;

namespace {

CheckpointState make_state(int64_t step, size_t n = 1000) {
  CheckpointState s;
  s.step = step;
  s.tokens_seen = step * 512;
  s.config_hash = std::string(64, 'a');
  s.data_position = {{"index", step * 8}, {"epoch", 0}};
  s.extra = {{"note", "x"}};
  for (size_t i = 0; i < n; ++i) {
    s.params.push_back(std::sin(static_cast<float>(i + step)));
    s.adam_m.push_back(static_cast<float>(i) * 1e-3f);
    s.adam_v.push_back(static_cast<float>(i) * 1e-6f);
  }
  if (n > 3) s.params[3] = -0.0f;  // bits, not values, must survive
  return s;
}

bool same(const CheckpointState& a, const CheckpointState& b) {
  const auto eq = [](const std::vector<float>& x, const std::vector<float>& y) {
    return x.size() == y.size() && std::memcmp(x.data(), y.data(), x.size() * sizeof(float)) == 0;
  };
  return a.step == b.step && a.tokens_seen == b.tokens_seen && a.config_hash == b.config_hash &&
         a.data_position == b.data_position && a.extra == b.extra && eq(a.params, b.params) &&
         eq(a.adam_m, b.adam_m) && eq(a.adam_v, b.adam_v);
}

std::string decode_error(const std::string& bytes) {
  try {
    decode_checkpoint(bytes, "ck");
  } catch (const CheckpointError& e) {
    return e.what();
  }
  return "";
}

}  // namespace

TEST_CASE("checkpoint: encode and decode round trip, bit for bit", "[run][checkpoint]") {
  const CheckpointState s = make_state(20);
  const std::string bytes = encode_checkpoint(s);
  CHECK(bytes.substr(0, 8) == "FP4LCKPT");
  CHECK(same(decode_checkpoint(bytes, "ck"), s));
  CHECK(same(decode_checkpoint(encode_checkpoint(make_state(0, 0)), "ck"), make_state(0, 0)));
}

TEST_CASE("checkpoint: a flipped bit anywhere, or a truncation, is detected", "[run][checkpoint]") {
  const std::string bytes = encode_checkpoint(make_state(5));
  // Every byte after the magic and version: a flip in the payload fails the checksum, a flip in
  // the header fails the size, digest or format checks.
  for (size_t at = 8; at < bytes.size(); at += (at < 200 ? 1 : 97)) {
    std::string bad = bytes;
    bad[at] = static_cast<char>(bad[at] ^ 0x10);
    INFO("byte " << at);
    CHECK_FALSE(decode_error(bad).empty());
  }
  std::string flipped = bytes;
  flipped[bytes.size() - 3] ^= 1;
  CHECK(decode_error(flipped).find("checksum mismatch") != std::string::npos);
  CHECK(decode_error(bytes.substr(0, bytes.size() - 1)).find("truncated") != std::string::npos);
  CHECK(decode_error(bytes.substr(0, 50)).find("truncated") != std::string::npos);
  CHECK(decode_error("").find("truncated") != std::string::npos);
  CHECK(decode_error(bytes + "x").find("padded") != std::string::npos);
  CHECK(decode_error("NOTACKPT" + bytes.substr(8)).find("bad magic") != std::string::npos);
}

TEST_CASE("checkpoint: files in a directory, the newest two kept", "[run][checkpoint]") {
  ScratchDir tmp;
  const auto dir = tmp / "checkpoints";
  CHECK_FALSE(load_latest_checkpoint(dir).has_value());  // no directory: nothing to resume
  for (int64_t step : {10, 20, 30}) write_checkpoint(dir, make_state(step));
  const auto files = list_checkpoints(dir);
  REQUIRE(files.size() == 2);
  CHECK(files[0].filename() == "step_0000000020.ckpt");
  CHECK(files[1].filename() == "step_0000000030.ckpt");
  CHECK_FALSE(std::filesystem::exists(dir / ".step_0000000030.ckpt.tmp"));
  const auto loaded = load_latest_checkpoint(dir);
  REQUIRE(loaded.has_value());
  CHECK(loaded->warnings.empty());
  CHECK(same(loaded->state, make_state(30)));
  // Step numbers order the files, not names: step 100 sorts after step 30.
  write_checkpoint(dir, make_state(100));
  CHECK(list_checkpoints(dir).back().filename() == "step_0000000100.ckpt");
}

TEST_CASE("checkpoint: a corrupted or truncated newest checkpoint falls back to the previous", "[run][checkpoint]") {
  ScratchDir tmp;
  const auto dir = tmp / "checkpoints";
  write_checkpoint(dir, make_state(10));
  const auto newest = write_checkpoint(dir, make_state(20));

  SECTION("flipped byte") {
    std::string bytes = slurp(newest);
    bytes[bytes.size() / 2] ^= 0x01;
    spit(newest, bytes);
  }
  SECTION("truncated") {
    const std::string bytes = slurp(newest);
    spit(newest, bytes.substr(0, bytes.size() / 3));
  }
  const auto loaded = load_latest_checkpoint(dir);
  REQUIRE(loaded.has_value());
  CHECK(loaded->state.step == 10);
  CHECK(same(loaded->state, make_state(10)));
  REQUIRE(loaded->warnings.size() == 1);
  CHECK(loaded->warnings[0].find("step_0000000020.ckpt") != std::string::npos);
  CHECK(loaded->warnings[0].find("renamed to step_0000000020.ckpt.corrupt") != std::string::npos);
  // Set aside, never read again: the next load finds step 10 without a warning.
  CHECK(std::filesystem::exists(dir / "step_0000000020.ckpt.corrupt"));
  CHECK(load_latest_checkpoint(dir)->warnings.empty());
}

TEST_CASE("checkpoint: when none verifies, a clear error and the files stay", "[run][checkpoint]") {
  ScratchDir tmp;
  const auto dir = tmp / "checkpoints";
  const auto a = write_checkpoint(dir, make_state(10));
  const auto b = write_checkpoint(dir, make_state(20));
  spit(a, "garbage");
  spit(b, slurp(b).substr(0, 200));
  for (int attempt = 0; attempt < 2; ++attempt) {  // the same answer every time
    try {
      load_latest_checkpoint(dir);
      FAIL("no error");
    } catch (const CheckpointError& e) {
      const std::string what = e.what();
      CHECK(what.rfind("no valid checkpoint in ", 0) == 0);
      CHECK(what.find("all 2 failed verification") != std::string::npos);
    }
  }
  CHECK(std::filesystem::exists(a));
  CHECK(std::filesystem::exists(b));
}

TEST_CASE("metrics.jsonl: rows append, and a torn last line is cut before appending", "[run][metrics]") {
  ScratchDir tmp;
  const auto path = tmp / "metrics.jsonl";
  {
    MetricsWriter w(path);
    w.write({{"kind", "train"}, {"step", 1}, {"loss", 2.5}});
    w.write({{"kind", "train"}, {"step", 2}, {"loss", finite_or_null(NAN)}});
  }
  CHECK(slurp(path) == "{\"kind\":\"train\",\"loss\":2.5,\"step\":1}\n{\"kind\":\"train\",\"loss\":null,\"step\":2}\n");
  spit(path, slurp(path) + "{\"kind\":\"tra");  // the process died mid-write
  {
    MetricsWriter w(path);
    w.write({{"kind", "train"}, {"step", 3}});
  }
  CHECK(slurp(path) == "{\"kind\":\"train\",\"loss\":2.5,\"step\":1}\n{\"kind\":\"train\",\"loss\":null,\"step\":2}\n"
                       "{\"kind\":\"train\",\"step\":3}\n");
  spit(path, "{\"partial");
  { MetricsWriter w(path); }
  CHECK(slurp(path).empty());
  CHECK(finite_or_null(INFINITY).is_null());
  CHECK(finite_or_null(1.25) == 1.25);
}
