// npy.cpp — see npy.h. The header is a Python dict literal such as
//   {'descr': '<f4', 'fortran_order': False, 'shape': (1024, 4096), }
// which is parsed here with a small tokenizer rather than pattern matching, so that a key order,
// spacing or quoting NumPy did not happen to use still reads, and garbage is refused.
#include "quant/npy.h"

#include <cerrno>
#include <cstring>
#include <fstream>
#include <iterator>
#include <map>
#include <stdexcept>

#include "base/user_error.h"

namespace fp4::npy {

namespace {

constexpr uint8_t kMagic[6] = {0x93, 'N', 'U', 'M', 'P', 'Y'};
// A header longer than this is not a tensor header; refusing it early keeps a corrupt length
// field from making us parse megabytes of data as text.
constexpr uint32_t kMaxHeaderLength = 1u << 20;
// Any one dimension; keeps the element count far from int64 overflow.
constexpr int64_t kMaxDim = int64_t{1} << 40;

[[noreturn]] void fail(const std::string& path, const std::string& what) {
  throw UserError(path + ": " + what);
}

// One value of the header dict.
struct Value {
  enum Kind { string, boolean, tuple } kind;
  std::string text;
  bool flag = false;
  std::vector<int64_t> items;
};

class HeaderParser {
 public:
  HeaderParser(const std::string& path, std::string_view text) : path_(path), s_(text) {}

  std::map<std::string, Value> dict() {
    skip_space();
    expect('{');
    std::map<std::string, Value> out;
    for (;;) {
      skip_space();
      if (peek() == '}') break;
      std::string key = quoted();
      skip_space();
      expect(':');
      skip_space();
      Value v = value();
      if (!out.emplace(key, std::move(v)).second) bad("the key '" + key + "' appears twice");
      skip_space();
      if (peek() == ',') {
        ++i_;
        continue;
      }
      if (peek() != '}') bad("expected ',' or '}' at header offset " + std::to_string(i_));
    }
    ++i_;
    skip_space();
    if (i_ != s_.size()) bad("unexpected text after the header dict");
    return out;
  }

 private:
  [[noreturn]] void bad(const std::string& what) {
    fail(path_, "malformed .npy header (" + what + "): the file is damaged or not written by NumPy");
  }
  char peek() const { return i_ < s_.size() ? s_[i_] : '\0'; }
  void skip_space() {
    // NumPy pads the header with spaces and ends it with a newline.
    while (i_ < s_.size() && (s_[i_] == ' ' || s_[i_] == '\t' || s_[i_] == '\n' || s_[i_] == '\r'))
      ++i_;
  }
  void expect(char c) {
    if (peek() != c) bad(std::string("expected '") + c + "' at header offset " + std::to_string(i_));
    ++i_;
  }
  std::string quoted() {
    const char q = peek();
    if (q != '\'' && q != '"') bad("expected a quoted key or string at header offset " + std::to_string(i_));
    ++i_;
    const size_t end = s_.find(q, i_);
    if (end == std::string_view::npos) bad("unterminated string");
    std::string out(s_.substr(i_, end - i_));
    i_ = end + 1;
    return out;
  }
  bool word(std::string_view w) {
    if (s_.substr(i_, w.size()) != w) return false;
    i_ += w.size();
    return true;
  }
  Value value() {
    Value v{Value::string, {}, false, {}};
    const char c = peek();
    if (c == '\'' || c == '"') {
      v.text = quoted();
    } else if (word("True")) {
      v.kind = Value::boolean;
      v.flag = true;
    } else if (word("False")) {
      v.kind = Value::boolean;
    } else if (c == '(') {
      v.kind = Value::tuple;
      ++i_;
      for (;;) {
        skip_space();
        if (peek() == ')') break;
        v.items.push_back(integer());
        skip_space();
        if (peek() == ',') {
          ++i_;
        } else if (peek() != ')') {
          bad("expected ',' or ')' in a tuple at header offset " + std::to_string(i_));
        }
      }
      ++i_;
    } else {
      bad("unexpected character at header offset " + std::to_string(i_));
    }
    return v;
  }
  int64_t integer() {
    if (peek() < '0' || peek() > '9') bad("expected a dimension at header offset " + std::to_string(i_));
    int64_t n = 0;
    while (peek() >= '0' && peek() <= '9') {
      n = n * 10 + (peek() - '0');
      if (n > kMaxDim) fail(path_, "a dimension is larger than 2^40: not a tensor fp4lab can hold");
      ++i_;
    }
    if (peek() == 'L') ++i_;  // Python 2 wrote long integers as 3L
    return n;
  }

  const std::string& path_;
  std::string_view s_;
  size_t i_ = 0;
};

uint32_t read_le(const uint8_t* p, int bytes) {
  uint32_t v = 0;
  for (int k = bytes - 1; k >= 0; --k) v = (v << 8) | p[k];
  return v;
}

int item_size(Dtype d) { return d == Dtype::float32 ? 4 : 2; }

}  // namespace

std::string_view dtype_name(Dtype dtype) {
  switch (dtype) {
    case Dtype::float32: return "float32";
    case Dtype::float16: return "float16";
    case Dtype::bf16: return "bf16";
  }
  return "?";
}

int64_t Array::size() const {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

Array parse(const std::string& path, const uint8_t* bytes, size_t size) {
  if (size < 10 || std::memcmp(bytes, kMagic, sizeof kMagic) != 0)
    fail(path, "not a .npy file (it does not start with \\x93NUMPY): save the tensor with numpy.save");
  const int major = bytes[6];
  if (major < 1 || major > 3)
    fail(path, ".npy format version " + std::to_string(major) + "." + std::to_string(bytes[7]) +
                   " is not supported (1.0, 2.0 and 3.0 are): save it again with numpy.save");
  // Version 1 has a 2-byte header length, versions 2 and 3 a 4-byte one.
  const size_t prefix = major == 1 ? 10 : 12;
  if (size < prefix) fail(path, "the file ends inside the .npy preamble: it is truncated");
  const uint32_t header_length = read_le(bytes + 8, major == 1 ? 2 : 4);
  if (header_length > kMaxHeaderLength)
    fail(path, "the .npy header claims " + std::to_string(header_length) +
                   " bytes: the file is damaged or not a .npy file");
  if (size - prefix < header_length)
    fail(path, "the file ends inside its .npy header: it is truncated");
  const std::string_view header(reinterpret_cast<const char*>(bytes + prefix), header_length);

  const std::map<std::string, Value> dict = HeaderParser(path, header).dict();
  for (const auto& [key, value] : dict)
    if (key != "descr" && key != "fortran_order" && key != "shape")
      fail(path, "unexpected key '" + key + "' in the .npy header: not a plain NumPy array file");
  auto need = [&](const char* key, Value::Kind kind) -> const Value& {
    auto it = dict.find(key);
    if (it == dict.end()) fail(path, std::string("the .npy header has no '") + key + "': the file is damaged");
    if (it->second.kind != kind) fail(path, std::string("the .npy header's '") + key + "' has the wrong type");
    return it->second;
  };
  const Value& descr = need("descr", Value::string);
  const Value& fortran = need("fortran_order", Value::boolean);
  const Value& shape = need("shape", Value::tuple);

  Array a;
  a.path = path;
  if (descr.text == "<f4") {
    a.dtype = Dtype::float32;
  } else if (descr.text == "<f2") {
    a.dtype = Dtype::float16;
  } else if (descr.text == "<u2") {
    a.dtype = Dtype::bf16;
  } else if (descr.text.size() > 1 && descr.text[0] == '>') {
    fail(path, "dtype '" + descr.text + "' is big-endian: save it little-endian (array.astype('<" +
                   descr.text.substr(1) + "'))");
  } else {
    fail(path, "dtype '" + descr.text +
                   "' is not supported: use float32 ('<f4'), float16 ('<f2') or bf16 stored as "
                   "uint16 ('<u2', e.g. bf16_array.view(numpy.uint16))");
  }
  if (fortran.flag)
    fail(path, "the array is in Fortran order: save numpy.ascontiguousarray(array) instead");
  if (shape.items.empty() || shape.items.size() > 2)
    fail(path, "the array is " + std::to_string(shape.items.size()) +
                   "-D: only 1-D and 2-D arrays are read (reshape it to [rows, cols], blocks run "
                   "along the last axis)");
  a.shape = shape.items;

  const size_t data_offset = prefix + header_length;
  // Each dimension is at most 2^40, but a product of two can still pass 2^63: check first.
  if (a.shape.size() == 2 && a.shape[0] != 0 && a.shape[1] > INT64_MAX / 8 / a.shape[0])
    fail(path, "the array shape is too large to be a real tensor");
  const int64_t count = a.size();
  const uint64_t need_bytes = static_cast<uint64_t>(count) * item_size(a.dtype);
  const uint64_t have_bytes = size - data_offset;
  if (have_bytes < need_bytes)
    fail(path, "the file is truncated: its header promises " + std::to_string(need_bytes) +
                   " bytes of " + std::string(dtype_name(a.dtype)) + " data, it holds " +
                   std::to_string(have_bytes));
  if (have_bytes > need_bytes)
    fail(path, "the file holds " + std::to_string(have_bytes - need_bytes) +
                   " bytes after its array: not a single .npy array (an .npz or a concatenation?)");
  a.data.assign(bytes + data_offset, bytes + size);
  return a;
}

Array read(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) fail(path, std::string("cannot open the file (") + std::strerror(errno) + "): check the path");
  std::vector<uint8_t> bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  if (in.bad()) fail(path, std::string("cannot read the file (") + std::strerror(errno) + ")");
  return parse(path, bytes.data(), bytes.size());
}

float half_to_float(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  const uint32_t exponent = (h >> 10) & 0x1fu;
  uint32_t mantissa = h & 0x3ffu;
  if (exponent == 0x1f) return bits_float(sign | 0x7f800000u | (mantissa << 13));  // Inf, NaN
  if (exponent != 0) return bits_float(sign | ((exponent + 112u) << 23) | (mantissa << 13));
  if (mantissa == 0) return bits_float(sign);
  // Subnormal half m·2^-24: normalize into an fp32 normal (every half subnormal is one).
  int e = -14;
  while ((mantissa & 0x400u) == 0) {
    mantissa <<= 1;
    --e;
  }
  mantissa &= 0x3ffu;
  return bits_float(sign | (static_cast<uint32_t>(e + 127) << 23) | (mantissa << 13));
}

std::vector<float> to_float(const Array& array) {
  const int64_t n = array.size();
  std::vector<float> out(n);
  const uint8_t* p = array.data.data();
  for (int64_t i = 0; i < n; ++i) {
    switch (array.dtype) {
      case Dtype::float32: out[i] = bits_float(read_le(p + 4 * i, 4)); break;
      case Dtype::float16: out[i] = half_to_float(static_cast<uint16_t>(read_le(p + 2 * i, 2))); break;
      case Dtype::bf16: out[i] = bf16_to_float(static_cast<bf16_t>(read_le(p + 2 * i, 2))); break;
    }
  }
  return out;
}

std::vector<bf16_t> to_bf16(const Array& array) {
  const int64_t n = array.size();
  std::vector<bf16_t> out(n);
  if (array.dtype == Dtype::bf16) {
    for (int64_t i = 0; i < n; ++i) out[i] = static_cast<bf16_t>(read_le(array.data.data() + 2 * i, 2));
    return out;
  }
  const std::vector<float> f = to_float(array);
  for (int64_t i = 0; i < n; ++i) out[i] = float_to_bf16(f[i]);
  return out;
}

}  // namespace fp4::npy
