// data_source.h — what the trainer sees of its data: a vocabulary size, an endless deterministic
// training stream that resumes from a serializable position, and a fixed validation token set.
//
// A data spec is either a shard directory written by `fp4lab data build` (shard_source.h) or a
// synthetic source `synthetic:markov?...` (synthetic_spec.h). Both present the training data as
// one token stream:
//   * shard directory: the training shards concatenated in manifest order, repeated forever; a
//     batch that runs past the end continues at the first token of the first shard (every
//     document ends with the separator, so the seam is a document boundary). Position p reads
//     token p mod train_tokens();
//   * synthetic: the chain's training stream, generated on demand, never repeating.
//
// Batches follow llm.c: a batch of B sequences of length T reads B*T + 1 consecutive stream tokens
// from position p; sequence r is tokens [p + r*T, p + r*T + T] (T + 1 tokens: inputs are the first
// T, targets the last T), so neighbouring sequences share one token; the position then advances
// by B*T. Every stream token after the first is a target exactly once per pass.
//
// A shard directory can also be read shuffled (StreamOrder::Kind::sequences): its training split
// is cut into W = floor((train_tokens - 1) / T) windows, window w being tokens [w*T, w*T + T], and
// epoch e reads every window once in the order of a seeded permutation pi_e (sequence_order.h).
// Sequence k of the stream (k = position / T) is window pi_e(k mod W) with e = k / W. Each window is
// what the file-order stream would have given as one sequence, so within an epoch every token but
// the first is still a target exactly once (the < T tokens after the last window are not read),
// and any prefix of the stream is a uniform sample of the corpus's windows rather than its first
// files.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace fp4::data {

// Where a training stream stands: enough to resume it exactly (checkpoints store it as JSON).
struct StreamPosition {
  uint64_t tokens = 0;             // stream tokens consumed so far (B*T per batch)
  std::vector<uint16_t> context;   // synthetic only: the `order` tokens before `tokens`, oldest first

  nlohmann::json to_json() const;
  // Throws UserError naming what is malformed.
  static StreamPosition from_json(const nlohmann::json& j);
  bool operator==(const StreamPosition&) const = default;
};

// How a training stream orders the data: the run config's train.shuffle and train.data_seed.
struct StreamOrder {
  enum class Kind : uint8_t { file = 0, sequences = 1 };
  Kind kind = Kind::file;
  uint64_t seed = 0;        // sequences: the permutations' seed
  int64_t seq_len = 0;      // sequences: the window length T; every batch must have this length

  static StreamOrder file_order() { return {}; }
  static StreamOrder shuffled(uint64_t seed, int64_t seq_len) { return {Kind::sequences, seed, seq_len}; }
};

struct ValidationSet {
  std::vector<uint16_t> tokens;
  // For the byte tokenizer: how many of `tokens` are document text rather than separators, so that
  // bits per byte = (nats per token) * tokens.size() / document_bytes / ln 2 over all of `tokens`.
  // 0 when bytes do not apply (synthetic sources).
  uint64_t document_bytes = 0;
};

class TrainStream {
 public:
  virtual ~TrainStream() = default;

  // Fills `out` (batch * (seq_len + 1) tokens, sequence-major as described above) and advances.
  // Throws UserError for non-positive sizes or a wrongly sized `out`.
  void next_batch(int64_t batch, int64_t seq_len, std::span<uint16_t> out);
  void next_batch(int64_t batch, int64_t seq_len, std::span<int32_t> out);
  std::vector<uint16_t> next_batch(int64_t batch, int64_t seq_len);

  virtual StreamPosition position() const = 0;

 protected:
  // Writes `batch` sequences of seq_len + 1 tokens, sequence-major, and advances the position by
  // batch * seq_len. The sizes are already checked. By default: the B*T + 1 consecutive stream
  // tokens of read_overlapping, laid out as above.
  virtual void read_batch(int64_t batch, int64_t seq_len, uint16_t* out);
  // Writes the n stream tokens from the position on and advances the position by n - 1, so the
  // next read starts at the last token of this one.
  virtual void read_overlapping(uint64_t n, uint16_t* out) = 0;

 private:
  std::vector<uint16_t> flat_;    // read_batch's contiguous read
  std::vector<uint16_t> buffer_;  // the int32 next_batch's tokens before widening
};

class DataSource {
 public:
  virtual ~DataSource() = default;

  // The spec as opened (canonical form for synthetic sources).
  virtual const std::string& spec() const = 0;
  // sha256 (hex) that names the exact data: of manifest.json for a shard directory (which holds
  // every shard's hash), of the canonical spec for a synthetic source. Checkpoints record it so a
  // resume against other data is caught.
  virtual const std::string& fingerprint() const = 0;
  virtual uint32_t vocab_size() const = 0;
  // Tokens in one pass over the training data; 0 for an endless synthetic stream.
  virtual uint64_t train_tokens() const = 0;
  // Tokens in the validation split; 0 for synthetic sources, whose held-out stream is endless.
  virtual uint64_t validation_tokens() const = 0;

  // The stream from its start, or from a position an earlier stream reported, in the given order.
  // Streams keep the source's data alive and are independent of each other and of the source
  // object. Throws std::invalid_argument for an order the source cannot give (a synthetic source
  // shuffled, a split shorter than one window) or a position that is not a whole number of
  // windows of a shuffled order.
  virtual StreamPosition start() const = 0;
  virtual std::unique_ptr<TrainStream> train_stream(const StreamPosition& from, const StreamOrder& order) const = 0;
  std::unique_ptr<TrainStream> train_stream(const StreamPosition& from) const {
    return train_stream(from, StreamOrder::file_order());
  }
  std::unique_ptr<TrainStream> train_stream() const { return train_stream(start()); }

  // The first min(n, validation_tokens()) validation tokens (n for synthetic sources): the same
  // tokens on every call and every machine. Throws UserError when n is 0 or the
  // source has no validation data.
  virtual ValidationSet validation(uint64_t n) const = 0;
};

// Opens a shard directory or a synthetic source. Throws UserError with one line naming
// the spec (or the file inside it) for anything wrong with it.
std::unique_ptr<DataSource> open_data(const std::string& spec);

}  // namespace fp4::data
