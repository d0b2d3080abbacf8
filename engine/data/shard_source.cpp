// shard_source.cpp — the training stream over mapped shards (wrapping at the end) and the
// validation prefix with its document-byte count.
#include "engine/data/shard_source.h"

#include <algorithm>
#include <cstring>
#include <stdexcept>

#include "base/sha256.h"
#include "base/user_error.h"
#include "engine/data/manifest.h"
#include "engine/data/sequence_order.h"
#include "engine/data/shard.h"

namespace fp4::data {
namespace {

namespace fs = std::filesystem;

struct Split {
  std::vector<std::unique_ptr<MappedShard>> shards;
  std::vector<uint64_t> starts;  // stream offset of each shard, then the total
  uint64_t total() const { return starts.back(); }

  // Copies tokens [p, p + n) of the split (p + n <= total).
  void copy(uint64_t p, uint64_t n, uint16_t* out) const {
    while (n > 0) {
      // The last shard starting at or before p; an empty shard never is, as the next starts at p too.
      size_t s = static_cast<size_t>(std::upper_bound(starts.begin(), starts.end(), p) - starts.begin()) - 1;
      uint64_t offset = p - starts[s];
      uint64_t take = std::min(n, shards[s]->header().tokens - offset);
      std::memcpy(out, shards[s]->tokens().data() + offset, take * sizeof(uint16_t));
      out += take;
      p += take;
      n -= take;
    }
  }
};

struct ShardData {
  fs::path dir;
  Manifest manifest;
  Split train, validation;
};

Split map_split(const fs::path& dir, const SplitSummary& summary, uint32_t vocab) {
  Split split;
  split.starts.push_back(0);
  for (const ShardEntry& e : summary.shards) {
    const fs::path path = dir / e.file;
    auto shard = std::make_unique<MappedShard>(path);
    if (shard->header().tokens != e.tokens)
      throw UserError(path.string() + ": holds " + std::to_string(shard->header().tokens) +
                      " tokens but manifest.json lists " + std::to_string(e.tokens) +
                      ": the directory changed after it was built; rebuild it with `fp4lab data build`");
    if (shard->header().vocab != vocab)
      throw UserError(path.string() + ": vocabulary size " + std::to_string(shard->header().vocab) +
                      " differs from manifest.json's " + std::to_string(vocab) +
                      "; rebuild the directory with `fp4lab data build`");
    shard->check_tokens();
    split.starts.push_back(split.starts.back() + e.tokens);
    split.shards.push_back(std::move(shard));
  }
  return split;
}

class ShardStream final : public TrainStream {
 public:
  ShardStream(std::shared_ptr<const ShardData> data, uint64_t position) : data_(std::move(data)), position_(position) {}

  StreamPosition position() const override { return {position_, {}}; }

 protected:
  void read_overlapping(uint64_t n, uint16_t* out) override {
    const Split& train = data_->train;
    uint64_t p = position_ % train.total();
    for (uint64_t left = n; left > 0;) {
      uint64_t take = std::min(left, train.total() - p);
      train.copy(p, take, out);
      out += take;
      left -= take;
      p = (p + take) % train.total();  // the end of the training data wraps to its start
    }
    position_ += n - 1;
  }

 private:
  std::shared_ptr<const ShardData> data_;
  uint64_t position_;
};

// The shuffled order (data_source.h): sequence k is window pi_e(k mod W) of the training split,
// e = k / W. The permutation of the current epoch is kept; a batch that crosses into the next
// epoch draws that one.
class ShuffledShardStream final : public TrainStream {
 public:
  ShuffledShardStream(std::shared_ptr<const ShardData> data, const StreamOrder& order, uint64_t position,
                      const std::string& spec)
      : data_(std::move(data)), seed_(order.seed), seq_len_(static_cast<uint64_t>(order.seq_len)), position_(position) {
    if (order.seq_len < 1)
      throw std::invalid_argument(spec + ": a shuffled stream needs a sequence length of at least 1");
    const uint64_t windows = (data_->train.total() - 1) / seq_len_;
    if (windows == 0)
      throw UserError(spec + ": the training split (" + std::to_string(data_->train.total()) +
                      " tokens) is shorter than one sequence of " + std::to_string(seq_len_) +
                      " + 1 tokens; build it from more text or use a shorter seq_len");
    if (windows > UINT32_MAX)
      throw UserError(spec + ": more than 2^32 - 1 windows of " + std::to_string(seq_len_) +
                      " tokens; use a longer seq_len");
    windows_ = static_cast<uint32_t>(windows);
    if (position_ % seq_len_ != 0)
      throw UserError(spec + ": stream position " + std::to_string(position_) +
                      " is not a whole number of sequences of " + std::to_string(seq_len_) +
                      " tokens; the checkpoint belongs to another sequence length");
  }

  StreamPosition position() const override { return {position_, {}}; }

 protected:
  void read_batch(int64_t batch, int64_t seq_len, uint16_t* out) override {
    if (static_cast<uint64_t>(seq_len) != seq_len_)
      throw std::invalid_argument("a stream shuffled in windows of " + std::to_string(seq_len_) +
                                  " tokens cannot give sequences of " + std::to_string(seq_len));
    for (int64_t r = 0; r < batch; ++r) {
      const uint64_t k = position_ / seq_len_;
      const uint64_t epoch = k / windows_;
      if (order_.empty() || epoch != epoch_) {
        order_ = window_permutation(seed_, epoch, windows_);
        epoch_ = epoch;
      }
      const uint64_t window = order_[k % windows_];
      data_->train.copy(window * seq_len_, seq_len_ + 1, out + static_cast<uint64_t>(r) * (seq_len_ + 1));
      position_ += seq_len_;
    }
  }
  // Every read goes through read_batch: a shuffled stream has no contiguous token sequence.
  void read_overlapping(uint64_t, uint16_t*) override {
    throw std::logic_error("ShuffledShardStream is read by whole sequences only");
  }

 private:
  std::shared_ptr<const ShardData> data_;
  uint64_t seed_;
  uint64_t seq_len_;
  uint64_t position_;
  uint32_t windows_ = 0;
  uint64_t epoch_ = 0;
  std::vector<uint32_t> order_;  // pi_epoch_, empty until the first read
};

class ShardSource final : public DataSource {
 public:
  ShardSource(std::string spec, std::shared_ptr<const ShardData> data, const std::string& manifest_text)
      : spec_(std::move(spec)), data_(std::move(data)), fingerprint_(sha256_hex(manifest_text)) {}

  const std::string& spec() const override { return spec_; }
  const std::string& fingerprint() const override { return fingerprint_; }
  uint32_t vocab_size() const override { return data_->manifest.vocab_size; }
  uint64_t train_tokens() const override { return data_->train.total(); }
  uint64_t validation_tokens() const override { return data_->validation.total(); }
  StreamPosition start() const override { return {}; }

  std::unique_ptr<TrainStream> train_stream(const StreamPosition& from, const StreamOrder& order) const override {
    if (!from.context.empty())
      throw UserError(spec_ + ": the stream position carries a synthetic source's context; the "
                      "checkpoint belongs to another data source");
    if (order.kind == StreamOrder::Kind::sequences)
      return std::make_unique<ShuffledShardStream>(data_, order, from.tokens, spec_);
    return std::make_unique<ShardStream>(data_, from.tokens);
  }

  ValidationSet validation(uint64_t n) const override {
    const Split& val = data_->validation;
    if (val.total() == 0)
      throw UserError(spec_ + ": has no validation tokens (no input had " +
                      std::to_string(data_->manifest.validation_every) +
                      " documents); build it from more documents or with a smaller --val-every");
    if (n == 0) throw UserError(spec_ + ": asked for 0 validation tokens; ask for at least 1");
    n = std::min(n, val.total());
    const std::string& sep = data_->manifest.separator;
    // Read a little past n so a separator that the prefix cuts through is still recognised.
    uint64_t read = std::min(val.total(), n + (sep.empty() ? 0 : sep.size() - 1));
    ValidationSet v;
    v.tokens.resize(read);
    val.copy(0, read, v.tokens.data());
    if (data_->manifest.tokenizer == "bytes") v.document_bytes = count_document_bytes(v.tokens, n, sep);
    v.tokens.resize(n);
    return v;
  }

 private:
  std::string spec_;
  std::shared_ptr<const ShardData> data_;
  std::string fingerprint_;
};

}  // namespace

uint64_t count_document_bytes(const std::vector<uint16_t>& tokens, uint64_t n, const std::string& separator) {
  const uint64_t L = separator.size();
  if (L == 0) return n;
  uint64_t separator_bytes = 0;
  for (uint64_t i = 0; i < n && i + L <= tokens.size();) {
    uint64_t j = 0;
    while (j < L && tokens[i + j] == static_cast<unsigned char>(separator[j])) ++j;
    if (j == L) {
      separator_bytes += std::min(L, n - i);  // only the part inside the prefix
      i += L;
    } else {
      ++i;
    }
  }
  return n - separator_bytes;
}

std::unique_ptr<DataSource> open_shard_directory(const fs::path& dir) {
  auto data = std::make_shared<ShardData>();
  data->dir = dir;
  std::string manifest_text;
  data->manifest = read_manifest(dir, &manifest_text);
  data->train = map_split(dir, data->manifest.train, data->manifest.vocab_size);
  data->validation = map_split(dir, data->manifest.validation, data->manifest.vocab_size);
  if (data->train.total() == 0)
    throw UserError(dir.string() + ": has no training tokens; build it from non-empty inputs");
  return std::make_unique<ShardSource>(dir.string(), std::move(data), manifest_text);
}

void verify_shard_directory(const fs::path& dir) {
  Manifest m = read_manifest(dir);
  for (const SplitSummary* s : {&m.train, &m.validation}) {
    for (const ShardEntry& e : s->shards) {
      std::string sha = sha256_file(dir / e.file);
      if (sha != e.sha256)
        throw UserError((dir / e.file).string() + ": sha256 " + sha + " differs from manifest.json's " +
                        e.sha256 + ": the shard is damaged or was replaced; rebuild the directory");
    }
  }
}

std::vector<uint64_t> count_train_tokens(const fs::path& dir) {
  Manifest m = read_manifest(dir);
  Split train = map_split(dir, m.train, m.vocab_size);
  std::vector<uint64_t> counts(m.vocab_size, 0);
  for (const auto& shard : train.shards)
    for (uint16_t t : shard->tokens()) ++counts[t];
  return counts;
}

}  // namespace fp4::data
