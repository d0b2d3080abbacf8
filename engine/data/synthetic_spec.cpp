// synthetic_spec.cpp — parsing and printing `synthetic:markov?...`.
#include "engine/data/synthetic_spec.h"

#include <charconv>
#include <cmath>
#include <limits>
#include <set>
#include <stdexcept>

#include "base/user_error.h"

namespace fp4::data {
namespace {

constexpr const char* kExample = "synthetic:markov?order=2&vocab=64&branch=8&alpha=1.1&seed=0";

struct Parser {
  std::string_view spec;

  [[noreturn]] void fail(const std::string& what) const {
    throw UserError("synthetic source \"" + std::string(spec) + "\": " + what);
  }

  uint64_t integer(std::string_view key, std::string_view value, uint64_t lo, uint64_t hi) const {
    uint64_t v = 0;
    auto [end, ec] = std::from_chars(value.data(), value.data() + value.size(), v);
    if (value.empty() || ec != std::errc() || end != value.data() + value.size())
      fail(std::string(key) + "=" + std::string(value) + " is not a non-negative integer" +
           (ec == std::errc::result_out_of_range ? " below 2^64" : ""));
    if (v < lo || v > hi)
      fail(std::string(key) + "=" + std::string(value) + " is outside " + std::to_string(lo) + ".." + std::to_string(hi));
    return v;
  }

  double real(std::string_view key, std::string_view value) const {
    double v = 0;
    auto [end, ec] = std::from_chars(value.data(), value.data() + value.size(), v);
    if (value.empty() || ec != std::errc() || end != value.data() + value.size() || !std::isfinite(v))
      fail(std::string(key) + "=" + std::string(value) + " is not a decimal number");
    if (v < 0.0 || v > kMaxMarkovAlpha) fail(std::string(key) + "=" + std::string(value) + " is outside 0..16");
    return v;
  }
};

}  // namespace

bool is_synthetic_spec(std::string_view spec) { return spec.substr(0, kSyntheticPrefix.size()) == kSyntheticPrefix; }

MarkovParams parse_synthetic_spec(std::string_view spec) {
  Parser p{spec};
  if (!is_synthetic_spec(spec)) p.fail("does not start with \"synthetic:\"");
  std::string_view rest = spec.substr(kSyntheticPrefix.size());
  size_t q = rest.find('?');
  std::string_view name = rest.substr(0, q);
  std::string_view query = q == std::string_view::npos ? std::string_view{} : rest.substr(q + 1);
  if (name != "markov")
    p.fail("unknown generator \"" + std::string(name) + "\"; the built-in one is markov, e.g. " + kExample);
  MarkovParams params;
  std::set<std::string_view> seen;
  while (!query.empty()) {
    size_t amp = query.find('&');
    std::string_view item = query.substr(0, amp);
    query = amp == std::string_view::npos ? std::string_view{} : query.substr(amp + 1);
    size_t eq = item.find('=');
    if (item.empty() || eq == std::string_view::npos)
      p.fail("\"" + std::string(item) + "\" is not key=value; write parameters as " + kExample);
    std::string_view key = item.substr(0, eq), value = item.substr(eq + 1);
    if (!seen.insert(key).second) p.fail("parameter " + std::string(key) + " is given twice");
    if (key == "order") {
      params.order = static_cast<uint32_t>(p.integer(key, value, 0, kMaxMarkovOrder));
    } else if (key == "vocab") {
      params.vocab = static_cast<uint32_t>(p.integer(key, value, 2, 65536));
    } else if (key == "branch") {
      params.branch = static_cast<uint32_t>(p.integer(key, value, 1, 65536));
    } else if (key == "alpha") {
      params.alpha = p.real(key, value);
    } else if (key == "seed") {
      params.seed = p.integer(key, value, 0, std::numeric_limits<uint64_t>::max());
    } else {
      p.fail("unknown parameter \"" + std::string(key) + "\"; markov takes order, vocab, branch, alpha and seed");
    }
  }
  if (std::string err = check_markov_params(params); !err.empty()) p.fail(err);
  return params;
}

std::string canonical_synthetic_spec(const MarkovParams& params) {
  char alpha[64];
  auto [end, ec] = std::to_chars(alpha, alpha + sizeof alpha, params.alpha);
  (void)ec;  // 64 characters always hold a double's shortest form
  return "synthetic:markov?order=" + std::to_string(params.order) + "&vocab=" + std::to_string(params.vocab) +
         "&branch=" + std::to_string(params.branch) + "&alpha=" + std::string(alpha, end) +
         "&seed=" + std::to_string(params.seed);
}

}  // namespace fp4::data
