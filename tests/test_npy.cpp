// The .npy reader: round trips of every accepted dtype through files this test writes byte by byte
// (so the reader is checked against the format, not against itself), and malformed files refused
// with one line naming the file.
#include <catch2/catch.hpp>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <limits>
#include <stdexcept>
#include <string>
#include <vector>

#include "base/user_error.h"
#include "quant/npy.h"
#include "tests/test_support.h"

namespace {

namespace fs = std::filesystem;
using namespace fp4::test;

std::string write_file(const std::string& name, const std::string& bytes) {
  const fs::path p = process_scratch_dir() / name;
  spit(p, bytes);
  return p.string();
}

// The error message reading `bytes` as a file gives ("" when it reads fine).
std::string error_of(const std::string& name, const std::string& bytes) {
  const std::string path = write_file(name, bytes);
  try {
    fp4::npy::read(path);
  } catch (const fp4::UserError& e) {
    return e.what();
  }
  return "";
}

void check_refused(const std::string& name, const std::string& bytes, const std::string& expect) {
  const std::string msg = error_of(name, bytes);
  INFO(msg);
  CHECK(msg.find(name) != std::string::npos);      // names the file
  CHECK(msg.find(expect) != std::string::npos);    // says what is wrong
  CHECK(msg.find('\n') == std::string::npos);      // on one line
}

}  // namespace

TEST_CASE("npy: float32 round trips in 2-D for header versions 1 to 3", "[npy]") {
  const std::vector<float> values = {0.0f, -0.0f, 1.0f, -2.5f, 3.14159265f, 1e-40f, 65504.0f, -1e30f,
                                     std::numeric_limits<float>::infinity(), 0.1f, 7.0f, -6.0f};
  std::string data;
  for (float v : values) {
    uint32_t u;
    std::memcpy(&u, &v, 4);
    put_le(data, u, 4);
  }
  for (int major : {1, 2, 3}) {
    const std::string path = write_file("f32_v" + std::to_string(major) + ".npy",
                                        npy_bytes(npy_dict("<f4", "(3, 4)"), data, major));
    const fp4::npy::Array a = fp4::npy::read(path);
    CHECK(a.dtype == fp4::npy::Dtype::float32);
    REQUIRE(a.shape == std::vector<int64_t>{3, 4});
    CHECK(a.rows() == 3);
    CHECK(a.cols() == 4);
    const std::vector<float> back = fp4::npy::to_float(a);
    REQUIRE(back.size() == values.size());
    for (size_t i = 0; i < values.size(); ++i) {
      CHECK(std::memcmp(&back[i], &values[i], 4) == 0);  // bit-exact, -0 and subnormals included
      CHECK(fp4::npy::to_bf16(a)[i] == fp4::float_to_bf16(values[i]));
    }
  }
}

TEST_CASE("npy: float16 round trip in 1-D over every class of half value", "[npy]") {
  // (bits, value): zero, negative zero, one, max, min normal, min subnormal, a subnormal, -2, inf.
  const std::vector<std::pair<uint16_t, float>> cases = {
      {0x0000, 0.0f},        {0x8000, -0.0f},          {0x3c00, 1.0f},
      {0x7bff, 65504.0f},    {0x0400, 0x1p-14f},       {0x0001, 0x1p-24f},
      {0x0203, 515 * 0x1p-24f}, {0xc000, -2.0f},       {0x7c00, std::numeric_limits<float>::infinity()},
      {0x3555, 0x1.554p-2f}};
  std::string data;
  for (const auto& c : cases) put_le(data, c.first, 2);
  const std::string path = write_file("f16.npy", npy_bytes(npy_dict("<f2", "(10,)"), data));
  const fp4::npy::Array a = fp4::npy::read(path);
  CHECK(a.dtype == fp4::npy::Dtype::float16);
  REQUIRE(a.shape == std::vector<int64_t>{10});
  CHECK(a.rows() == 1);
  CHECK(a.cols() == 10);
  const std::vector<float> back = fp4::npy::to_float(a);
  for (size_t i = 0; i < cases.size(); ++i) {
    INFO("half bits " << cases[i].first);
    CHECK(std::memcmp(&back[i], &cases[i].second, 4) == 0);
  }
  CHECK(std::isnan(fp4::npy::half_to_float(0x7e00)));
  CHECK(std::signbit(fp4::npy::half_to_float(0xfc00)));
}

TEST_CASE("npy: bf16 stored as uint16 is taken bit for bit", "[npy]") {
  const std::vector<uint16_t> bits = {0x0000, 0x3f80, 0xc0c0, 0x7f7f, 0x0001, 0x8000, 0x4049, 0xff80};
  std::string data;
  for (uint16_t b : bits) put_le(data, b, 2);
  // Header keys in another order and with double quotes: still a valid Python dict.
  const std::string dict = "{\"shape\": (2, 4), \"fortran_order\": False, \"descr\": \"<u2\"}";
  const std::string path = write_file("bf16.npy", npy_bytes(dict, data, 2));
  const fp4::npy::Array a = fp4::npy::read(path);
  CHECK(a.dtype == fp4::npy::Dtype::bf16);
  REQUIRE(a.shape == std::vector<int64_t>{2, 4});
  const std::vector<fp4::bf16_t> back = fp4::npy::to_bf16(a);
  CHECK(back == std::vector<fp4::bf16_t>(bits.begin(), bits.end()));
  CHECK(fp4::npy::to_float(a)[1] == 1.0f);
  CHECK(fp4::npy::to_float(a)[2] == -6.0f);
}

TEST_CASE("npy: malformed or unsupported files are refused with one line naming the file", "[npy]") {
  const std::string f32x4(16, '\0');
  check_refused("bad_magic.npy", "PK\x03\x04 this is a zip", "not a .npy file");
  check_refused("empty.npy", "", "not a .npy file");
  check_refused("version9.npy", std::string("\x93NUMPY\x09\x00\x10\x00", 10) + std::string(16, ' '),
                "version 9.0 is not supported");
  check_refused("truncated_data.npy", npy_bytes(npy_dict("<f4", "(2, 4)"), f32x4), "truncated");
  check_refused("trailing.npy", npy_bytes(npy_dict("<f4", "(2,)"), f32x4), "after its array");
  std::string cut = npy_bytes(npy_dict("<f4", "(4,)"), f32x4);
  check_refused("truncated_header.npy", cut.substr(0, 30), "ends inside its .npy header");
  check_refused("big_endian.npy", npy_bytes(npy_dict(">f4", "(4,)"), f32x4), "big-endian");
  check_refused("float64.npy", npy_bytes(npy_dict("<f8", "(2,)"), f32x4), "dtype '<f8' is not supported");
  check_refused("int16.npy", npy_bytes(npy_dict("<i2", "(8,)"), f32x4), "bf16 stored as uint16");
  check_refused("fortran.npy",
                npy_bytes("{'descr': '<f4', 'fortran_order': True, 'shape': (2, 2), }", f32x4), "Fortran order");
  check_refused("three_d.npy", npy_bytes(npy_dict("<f4", "(1, 2, 2)"), f32x4), "3-D");
  check_refused("scalar.npy", npy_bytes(npy_dict("<f4", "()"), std::string(4, '\0')), "0-D");
  check_refused("no_shape.npy", npy_bytes("{'descr': '<f4', 'fortran_order': False}", f32x4), "no 'shape'");
  check_refused("garbage_header.npy", npy_bytes("{'descr': <f4>}", f32x4), "malformed .npy header");
  check_refused("extra_key.npy",
                npy_bytes("{'descr': '<f4', 'fortran_order': False, 'shape': (4,), 'x': 1}", f32x4),
                "malformed .npy header");
  check_refused("huge_header.npy", std::string("\x93NUMPY\x02\x00\xff\xff\xff\x7f", 12), "header claims");

  const std::string missing = (process_scratch_dir() / "does_not_exist.npy").string();
  try {
    fp4::npy::read(missing);
    FAIL("a missing file was read");
  } catch (const fp4::UserError& e) {
    CHECK(std::string(e.what()).find("does_not_exist.npy: cannot open") != std::string::npos);
  }
}
