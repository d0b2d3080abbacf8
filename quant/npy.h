// npy.h — a small reader for NumPy .npy files: the way real tensors (weights, activations,
// gradients dumped from a framework) reach fp4lab.
//
// Accepted: format versions 1.0, 2.0 and 3.0 (3.0 only differs in the header's text encoding),
// little-endian, C order, 1-D or 2-D, with dtype float32 ('<f4'), float16 ('<f2') or bf16 stored
// as uint16 ('<u2': NumPy has no bf16 type, so save `t.view(torch.int16).numpy().view(np.uint16)`
// or an ml_dtypes bf16 array `.view(np.uint16)`). Anything else is refused with one line that names
// the file, says what is wrong and what to do: these files come from users.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "kernels/numerics.h"

namespace fp4::npy {

enum class Dtype : uint8_t { float32 = 0, float16 = 1, bf16 = 2 };

// "float32", "float16", "bf16".
std::string_view dtype_name(Dtype dtype);

struct Array {
  std::string path;              // for messages
  Dtype dtype = Dtype::float32;
  std::vector<int64_t> shape;    // 1 or 2 entries, C order
  std::vector<uint8_t> data;     // the raw little-endian element bytes, row-major

  int64_t size() const;          // number of elements
  // The array as a matrix whose rows run along the last axis: a 1-D array of n is 1 x n.
  int64_t rows() const { return shape.size() == 2 ? shape[0] : 1; }
  int64_t cols() const { return shape.empty() ? 0 : shape.back(); }
};

// Reads and checks a whole file. Throws UserError("PATH: what; what to do").
Array read(const std::string& path);

// The same checks on bytes already in memory; `path` only names them in messages.
Array parse(const std::string& path, const uint8_t* bytes, size_t size);

// IEEE binary16 bits to fp32, exactly (subnormals, infinities and NaN included).
float half_to_float(uint16_t h);

// The elements as fp32: exact for all three dtypes.
std::vector<float> to_float(const Array& array);

// The elements as bf16 bits, what fp4lab's quantizers take: bf16 files as they are, float32 and
// float16 rounded to nearest even (fp4::float_to_bf16).
std::vector<bf16_t> to_bf16(const Array& array);

}  // namespace fp4::npy
