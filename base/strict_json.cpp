// strict_json.cpp — see strict_json.h. nlohmann's SAX interface builds the document, so that every
// key can be checked as it arrives and every error carries its position in the text.
#include "base/strict_json.h"

#include <cstddef>
#include <iterator>
#include <map>
#include <vector>

#include <fmt/format.h>

#include "base/user_error.h"

namespace fp4 {

namespace {

using nlohmann::json;

// A character iterator that records how far the parser has read, so that a callback knows where
// in the text it is (nlohmann reads its input one character at a time through it).
class TrackingIterator {
 public:
  using iterator_category = std::forward_iterator_tag;
  using value_type = char;
  using difference_type = std::ptrdiff_t;
  using pointer = const char*;
  using reference = const char&;

  TrackingIterator() = default;
  TrackingIterator(const char* p, const char** read_to) : p_(p), read_to_(read_to) {}
  reference operator*() const { return *p_; }
  TrackingIterator& operator++() {
    ++p_;
    if (read_to_ != nullptr) *read_to_ = p_;
    return *this;
  }
  TrackingIterator operator++(int) {
    TrackingIterator before = *this;
    ++*this;
    return before;
  }
  bool operator==(const TrackingIterator& o) const { return p_ == o.p_; }
  bool operator!=(const TrackingIterator& o) const { return p_ != o.p_; }

 private:
  const char* p_ = nullptr;
  const char** read_to_ = nullptr;
};

struct Position {
  size_t line = 1, col = 1;
};

Position position_at(std::string_view text, size_t offset) {
  Position p;
  for (size_t i = 0; i < offset && i < text.size(); ++i) {
    if (text[i] == '\n') {
      ++p.line;
      p.col = 1;
    } else {
      ++p.col;
    }
  }
  return p;
}

// nlohmann's message without its "[json.exception.parse_error.101] parse error at line 1, column
// 5: " prefix (we say where ourselves, as file:line:col).
std::string bare_message(const std::string& what) {
  std::string out = what;
  if (const size_t p = out.find("] "); out.rfind("[json.exception", 0) == 0 && p != std::string::npos)
    out = out.substr(p + 2);
  if (const size_t q = out.find(": "); out.rfind("parse error", 0) == 0 && q != std::string::npos)
    out = out.substr(q + 2);
  return out;
}

class StrictBuilder {
 public:
  StrictBuilder(std::string_view text, const std::string& file, const char* const* read_to)
      : text_(text), file_(file), read_to_(read_to) {}

  json take() { return std::move(root_); }

  bool null() { return put(json(nullptr)); }
  bool boolean(bool v) { return put(json(v)); }
  bool number_integer(json::number_integer_t v) { return put(json(v)); }
  bool number_unsigned(json::number_unsigned_t v) { return put(json(v)); }
  bool number_float(json::number_float_t v, const std::string&) { return put(json(v)); }
  bool string(std::string& v) { return put(json(std::move(v))); }
  bool binary(json::binary_t&) { return fail(offset(), path(true), "binary values are not JSON"); }
  bool start_object(size_t) {
    open(json::object());
    return true;
  }
  bool end_object() { return close(); }
  bool start_array(size_t) {
    open(json::array());
    return true;
  }
  bool end_array() { return close(); }

  bool key(std::string& k) {
    Frame& f = frames_.back();
    // The parser has just read the key's closing quote; its opening quote is where it starts.
    const size_t at = key_start(offset());
    if (const auto seen = f.keys.find(k); seen != f.keys.end()) {
      const Position first = position_at(text_, seen->second);
      std::string where = path(false);
      where += (where.empty() ? "" : ".") + k;
      fail(at, where, fmt::format("is given twice (first at line {}, column {}); keep one", first.line, first.col));
    }
    f.keys.emplace(k, at);
    f.key = std::move(k);
    return true;
  }

  bool parse_error(size_t position, const std::string& last_token, const nlohmann::detail::exception& e) {
    // A number that overflows a double (1e400) arrives here too, positioned just past the number.
    if (e.id == 406)
      return fail(position >= last_token.size() ? position - last_token.size() : 0, path(true),
                  bare_message(e.what()) + ": the number is out of range");
    return fail(position == 0 ? 0 : position - 1, "", "malformed JSON: " + bare_message(e.what()));
  }

 private:
  struct Frame {
    json* value;
    std::string key;                     // objects: the key the next value goes under
    std::map<std::string, size_t> keys;  // objects: every key so far, with its offset in the text
  };

  size_t offset() const { return static_cast<size_t>(*read_to_ - text_.data()); }

  size_t key_start(size_t after_quote) const {
    for (size_t i = after_quote >= 2 ? after_quote - 2 : 0; i > 0; --i) {
      if (text_[i] != '"') continue;
      size_t backslashes = 0;
      while (backslashes < i && text_[i - 1 - backslashes] == '\\') ++backslashes;
      if (backslashes % 2 == 0) return i;
    }
    return 0;
  }

  // Where the parser is, as "train.lr" or "recipe.sr[1]": the keys (and array indices) of the
  // open containers, the innermost one's included when `with_top` is set.
  std::string path(bool with_top) const {
    std::string out;
    for (size_t i = 0; i < frames_.size(); ++i) {
      const bool top = i + 1 == frames_.size();
      if (top && !with_top) break;
      const Frame& f = frames_[i];
      if (f.value->is_object()) {
        if (!f.key.empty()) out += (out.empty() ? "" : ".") + f.key;
      } else {
        // Below the top the element being read is the last one placed; at the top, the next.
        out += fmt::format("[{}]", top ? f.value->size() : f.value->size() - 1);
      }
    }
    return out;
  }

  [[noreturn]] bool fail(size_t at, const std::string& where, const std::string& what) const {
    const Position p = position_at(text_, at);
    throw UserError(fmt::format("{}:{}:{}: {}{}", file_, p.line, p.col, where.empty() ? "" : where + ": ", what));
  }

  json* place(json v) {
    if (frames_.empty()) {
      root_ = std::move(v);
      return &root_;
    }
    json& top = *frames_.back().value;
    if (top.is_array()) {
      top.push_back(std::move(v));
      return &top.back();
    }
    json& slot = top[frames_.back().key];
    slot = std::move(v);
    return &slot;
  }
  bool put(json v) {
    place(std::move(v));
    return true;
  }
  void open(json v) { frames_.push_back(Frame{place(std::move(v)), {}, {}}); }
  bool close() {
    frames_.pop_back();
    return true;
  }

  std::string_view text_;
  const std::string& file_;
  const char* const* read_to_;
  json root_;
  std::vector<Frame> frames_;
};

}  // namespace

json parse_json_strictly(std::string_view text, const std::string& file) {
  const char* read_to = text.data();
  StrictBuilder builder(text, file, &read_to);
  const TrackingIterator first(text.data(), &read_to), last(text.data() + text.size(), nullptr);
  json::sax_parse(first, last, &builder);
  return builder.take();
}

}  // namespace fp4
