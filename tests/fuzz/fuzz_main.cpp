// fuzz_main.cpp — the libFuzzer entry for one target, chosen at compile time by
// FP4LAB_FUZZ_TARGET (tests/fuzz/CMakeLists.txt builds fp4lab_fuzz_<target> for each).
#include <cstddef>
#include <cstdint>

#include "tests/fuzz/entry_points.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  fp4::fuzz::FP4LAB_FUZZ_TARGET(data, size);
  return 0;
}
