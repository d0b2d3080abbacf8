// synthetic_source.cpp — streams over a MarkovChain, shared between the source and its streams.
#include "engine/data/synthetic_source.h"

#include <stdexcept>

#include "base/sha256.h"
#include "base/user_error.h"
#include "engine/data/markov_chain.h"
#include "engine/data/synthetic_spec.h"

namespace fp4::data {
namespace {

class SyntheticStream final : public TrainStream {
 public:
  SyntheticStream(std::shared_ptr<const MarkovChain> chain, uint64_t index, uint64_t context)
      : chain_(std::move(chain)), index_(index), context_(context) {}

  StreamPosition position() const override { return {index_, chain_->context_tokens(context_)}; }

 protected:
  void read_overlapping(uint64_t n, uint16_t* out) override {
    if (n == 0) return;
    // The position moves to the last token read, so that token is generated but not stepped over.
    uint64_t context = chain_->generate(DataPurpose::train_stream, index_, context_, out, n - 1);
    chain_->generate(DataPurpose::train_stream, index_ + n - 1, context, out + n - 1, 1);
    index_ += n - 1;
    context_ = context;
  }

 private:
  std::shared_ptr<const MarkovChain> chain_;
  uint64_t index_;
  uint64_t context_;  // the context before token index_
};

class SyntheticSource final : public DataSource {
 public:
  explicit SyntheticSource(const MarkovParams& params)
      : chain_(std::make_shared<const MarkovChain>(params)),
        spec_(canonical_synthetic_spec(params)),
        fingerprint_(sha256_hex(spec_)) {}

  const std::string& spec() const override { return spec_; }
  const std::string& fingerprint() const override { return fingerprint_; }
  uint32_t vocab_size() const override { return chain_->params().vocab; }
  uint64_t train_tokens() const override { return 0; }
  uint64_t validation_tokens() const override { return 0; }

  StreamPosition start() const override {
    return {0, chain_->context_tokens(MarkovChain::initial_context())};
  }

  std::unique_ptr<TrainStream> train_stream(const StreamPosition& from, const StreamOrder& order) const override {
    if (order.kind != StreamOrder::Kind::file)
      throw std::invalid_argument(spec_ + ": a synthetic stream cannot be shuffled (it is endless, and every "
                                  "position is already a fresh draw of the chain); read it in order");
    uint64_t context = chain_->context_index(from.context);  // checks length and tokens
    return std::make_unique<SyntheticStream>(chain_, from.tokens, context);
  }

  ValidationSet validation(uint64_t n) const override {
    if (n == 0 || n > kMaxSyntheticValidationTokens)
      throw UserError(spec_ + ": validation token count " + std::to_string(n) + " is outside 1..2^31");
    ValidationSet v;
    v.tokens.resize(n);
    chain_->generate(DataPurpose::validation_stream, 0, MarkovChain::initial_context(), v.tokens.data(), n);
    return v;
  }

 private:
  std::shared_ptr<const MarkovChain> chain_;
  std::string spec_;
  std::string fingerprint_;
};

}  // namespace

std::unique_ptr<DataSource> open_synthetic_source(const std::string& spec) {
  MarkovParams params = parse_synthetic_spec(spec);
  try {
    return std::make_unique<SyntheticSource>(params);
  } catch (const UserError& e) {
    throw UserError("synthetic source \"" + spec + "\": " + e.what());
  }
}

}  // namespace fp4::data
