// data_source.cpp — batch layout shared by every stream, position JSON, and the spec dispatch.
#include "engine/data/data_source.h"

#include <algorithm>
#include <stdexcept>

#include "base/user_error.h"
#include "engine/data/shard_source.h"
#include "engine/data/synthetic_source.h"
#include "engine/data/synthetic_spec.h"

namespace fp4::data {
namespace {

// A bound on one batch keeps a typo (seq_len 1e9) from becoming a multi-gigabyte allocation.
constexpr uint64_t kMaxBatchTokens = uint64_t{1} << 31;

// batch * (seq_len + 1), the size of a batch buffer, after checking both are in range.
uint64_t batch_buffer_size(int64_t batch, int64_t seq_len) {
  if (batch < 1 || seq_len < 1)
    throw std::invalid_argument("batch " + std::to_string(batch) + " x sequence length " + std::to_string(seq_len) +
                                ": both must be at least 1");
  uint64_t b = static_cast<uint64_t>(batch), t = static_cast<uint64_t>(seq_len);
  if (t + 1 > kMaxBatchTokens / b)
    throw std::invalid_argument("batch " + std::to_string(batch) + " x sequence length " + std::to_string(seq_len) +
                                " is above 2^31 tokens");
  return b * (t + 1);
}

// The number of stream tokens one batch reads (B*T + 1), after checking the caller's buffer.
uint64_t batch_read_size(int64_t batch, int64_t seq_len, size_t out_size) {
  uint64_t size = batch_buffer_size(batch, seq_len);
  if (out_size != size)
    throw std::invalid_argument("batch buffer holds " + std::to_string(out_size) +
                                " tokens, not batch * (seq_len + 1) = " + std::to_string(size));
  return static_cast<uint64_t>(batch) * static_cast<uint64_t>(seq_len) + 1;
}

// Sequence r of the batch is stream tokens [r*T, r*T + T] of the contiguous read.
void lay_out(const std::vector<uint16_t>& flat, int64_t batch, int64_t seq_len, uint16_t* out) {
  const size_t T = static_cast<size_t>(seq_len);
  for (size_t r = 0; r < static_cast<size_t>(batch); ++r)
    std::copy(flat.begin() + r * T, flat.begin() + r * T + T + 1, out + r * (T + 1));
}

}  // namespace

nlohmann::json StreamPosition::to_json() const { return {{"tokens", tokens}, {"context", context}}; }

StreamPosition StreamPosition::from_json(const nlohmann::json& j) {
  auto bad = [](const std::string& what) {
    throw UserError("data stream position " + what + "; expected {\"tokens\": N, \"context\": [...]}");
  };
  if (!j.is_object() || !j.contains("tokens") || !j.at("tokens").is_number_unsigned()) bad("has no non-negative integer \"tokens\"");
  StreamPosition p;
  p.tokens = j.at("tokens").get<uint64_t>();
  if (j.contains("context")) {
    const nlohmann::json& c = j.at("context");
    if (!c.is_array()) bad("has a \"context\" that is not a list");
    for (const nlohmann::json& t : c) {
      if (!t.is_number_unsigned() || t.get<uint64_t>() > 65535) bad("has a context token that is not in 0..65535");
      p.context.push_back(static_cast<uint16_t>(t.get<uint64_t>()));
    }
  }
  return p;
}

void TrainStream::read_batch(int64_t batch, int64_t seq_len, uint16_t* out) {
  flat_.resize(static_cast<size_t>(batch) * static_cast<size_t>(seq_len) + 1);
  read_overlapping(flat_.size(), flat_.data());
  lay_out(flat_, batch, seq_len, out);
}

void TrainStream::next_batch(int64_t batch, int64_t seq_len, std::span<uint16_t> out) {
  batch_read_size(batch, seq_len, out.size());
  read_batch(batch, seq_len, out.data());
}

void TrainStream::next_batch(int64_t batch, int64_t seq_len, std::span<int32_t> out) {
  batch_read_size(batch, seq_len, out.size());
  buffer_.resize(out.size());
  read_batch(batch, seq_len, buffer_.data());
  for (size_t i = 0; i < out.size(); ++i) out[i] = static_cast<int32_t>(buffer_[i]);
}

std::vector<uint16_t> TrainStream::next_batch(int64_t batch, int64_t seq_len) {
  std::vector<uint16_t> out(batch_buffer_size(batch, seq_len));
  next_batch(batch, seq_len, std::span<uint16_t>(out));
  return out;
}

std::unique_ptr<DataSource> open_data(const std::string& spec) {
  if (spec.empty())
    throw UserError("empty data spec; give a shard directory or synthetic:markov?...");
  if (is_synthetic_spec(spec)) return open_synthetic_source(spec);
  return open_shard_directory(spec);
}

}  // namespace fp4::data
