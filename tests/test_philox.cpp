// Philox4x32-10 (NUMERICS.md §6): Random123's known-answer vectors, and the element-index counter
// mapping: counter = (index >> 2 (low 32 bits), index >> 34, stream, step), key = the 64-bit seed
// (low word first), the element takes word index & 3.
#include <catch2/catch.hpp>

#include <cmath>
#include <set>
#include <utility>

#include "kernels/numerics.h"

namespace {

void check_words(const fp4::Philox4& r, uint32_t a, uint32_t b, uint32_t c, uint32_t d) {
  CHECK(r.w[0] == a);
  CHECK(r.w[1] == b);
  CHECK(r.w[2] == c);
  CHECK(r.w[3] == d);
}

}  // namespace

TEST_CASE("Philox4x32-10: Random123 known-answer vectors", "[numerics][philox]") {
  // Random123 kat_vectors, philox4x32 10 rounds.
  check_words(fp4::philox4x32_10(0, 0, 0, 0, 0, 0), 0x6627e8d5u, 0xe169c58du, 0xbc57ac4cu, 0x9b00dbd8u);
  check_words(fp4::philox4x32_10(0xffffffffu, 0xffffffffu, 0xffffffffu, 0xffffffffu, 0xffffffffu, 0xffffffffu),
              0x408f276du, 0x41c83b0eu, 0xa20bc7c6u, 0x6d5451fdu);
  check_words(fp4::philox4x32_10(0x243f6a88u, 0x85a308d3u, 0x13198a2eu, 0x03707344u, 0xa4093822u, 0x299f31d0u),
              0xd16cfe09u, 0x94fdccebu, 0x5001e420u, 0x24126ea1u);
}

TEST_CASE("Philox: element index -> counter words and word index", "[numerics][philox]") {
  // ctr 0, key 0 is the first KAT vector: elements 0..3 of seed 0, stream 0, step 0 get its four
  // words in order.
  CHECK(fp4::philox_word_for_element(0, 0, 0, 0) == 0x6627e8d5u);
  CHECK(fp4::philox_word_for_element(0, 0, 0, 1) == 0xe169c58du);
  CHECK(fp4::philox_word_for_element(0, 0, 0, 2) == 0xbc57ac4cu);
  CHECK(fp4::philox_word_for_element(0, 0, 0, 3) == 0x9b00dbd8u);
  // The key is the seed, low 32 bits in key word 0: with seed 0x299f31d0'a4093822, stream
  // 0x13198a2e, step 0x03707344, element index 0x243f6a88 << 2 has counter word 0 = 0x243f6a88 and
  // word 1 = 0 (index >> 34 = 0).
  const uint64_t seed = 0x299f31d0a4093822ull;
  const fp4::Philox4 direct = fp4::philox4x32_10(0x243f6a88u, 0, 0x13198a2eu, 0x03707344u, 0xa4093822u, 0x299f31d0u);
  const fp4::Philox4 via = fp4::philox_for_elements(seed, 0x13198a2eu, 0x03707344u, 0x243f6a88ull << 2);
  check_words(via, direct.w[0], direct.w[1], direct.w[2], direct.w[3]);

  struct Case {
    uint64_t index;
    uint32_t c0, c1;
    int word;
  };
  // Worked by hand: index = c1 << 34 | c0 << 2 | word.
  const Case cases[] = {
      {0, 0, 0, 0},
      {7, 1, 0, 3},
      {(0x12345678ull << 2) | 2, 0x12345678u, 0, 2},
      {(5ull << 34) | (0x12345678ull << 2) | 3, 0x12345678u, 5, 3},
      {(0xffffffffull << 2) | 1, 0xffffffffu, 0, 1},           // index >> 2 uses all 32 bits
      {1ull << 34, 0, 1, 0},                                    // the first index past 2^34
      {0xffffffffffffffffull, 0xffffffffu, 0x3fffffffu, 3},    // the largest index
  };
  const uint32_t stream = 0x00a1c003u, step = 4242;
  const uint64_t s2 = 0x0102030405060708ull;
  for (const Case& c : cases) {
    INFO("index 0x" << std::hex << c.index);
    const fp4::Philox4 want = fp4::philox4x32_10(c.c0, c.c1, stream, step, 0x05060708u, 0x01020304u);
    CHECK(fp4::philox_word_for_element(s2, stream, step, c.index) == want.w[c.word]);
  }
  // Four consecutive elements 4k..4k+3 share one call; 4k+4 starts the next counter.
  const fp4::Philox4 k9 = fp4::philox_for_elements(s2, stream, step, 36);
  for (uint64_t i = 36; i < 40; ++i) CHECK(fp4::philox_word_for_element(s2, stream, step, i) == k9.w[i & 3]);
  CHECK(fp4::philox_word_for_element(s2, stream, step, 40) == fp4::philox4x32_10(10, 0, stream, step, 0x05060708u, 0x01020304u).w[0]);
}

TEST_CASE("Philox: stream packing names a tensor copy", "[numerics][philox]") {
  // bits 31..16 linear id, 15..14 GEMM, 13..12 operand, 11..0 micro-step.
  CHECK(fp4::philox_stream(3, fp4::Gemm::wgrad, fp4::Operand::dy, 5) == 0x0003A005u);
  CHECK(fp4::philox_stream(0, fp4::Gemm::fprop, fp4::Operand::x, 0) == 0u);
  CHECK(fp4::philox_stream(0xffff, fp4::Gemm::dgrad, fp4::Operand::w, 0xfff) == 0xffff5fffu);
  // The six slots of one layer and micro-step are six different streams.
  std::set<uint32_t> slots;
  const std::pair<fp4::Gemm, fp4::Operand> six[] = {
      {fp4::Gemm::fprop, fp4::Operand::x},  {fp4::Gemm::fprop, fp4::Operand::w},
      {fp4::Gemm::dgrad, fp4::Operand::dy}, {fp4::Gemm::dgrad, fp4::Operand::w},
      {fp4::Gemm::wgrad, fp4::Operand::dy}, {fp4::Gemm::wgrad, fp4::Operand::x}};
  for (const auto& [g, o] : six) slots.insert(fp4::philox_stream(7, g, o, 2));
  CHECK(slots.size() == 6);
  // Element draws (counter word 1 = index >> 34) and RHT sign draws (word 1 = 0xffffffff) cannot
  // share a counter for any tensor below 2^34 * 0xffffffff elements.
  CHECK(fp4::kPhiloxNonElementDomain == 0xffffffffu);
}

TEST_CASE("Philox: u is uniform on 0..1 to within 4 sigma over 100000 words", "[numerics][philox]") {
  const int n = 100000;
  double sum = 0;
  int bits_set[32] = {};
  for (int i = 0; i < n; ++i) {
    const uint32_t r = fp4::philox_word_for_element(99, 1, 2, static_cast<uint64_t>(i));
    sum += fp4::uniform_from_word(r);
    for (int b = 0; b < 32; ++b) bits_set[b] += (r >> b) & 1;
  }
  // mean of U[0,1): 1/2, sigma of the mean sqrt(1/12/n).
  CHECK(std::abs(sum / n - 0.5) < 4.0 * std::sqrt(1.0 / 12.0 / n));
  // each bit: Binomial(n, 1/2), sigma = sqrt(n)/2 ~ 158; 5 sigma over 32 bits.
  for (int b = 0; b < 32; ++b) {
    INFO("bit " << b);
    CHECK(std::abs(bits_set[b] - n / 2) < 5.0 * std::sqrt(static_cast<double>(n)) / 2.0);
  }
}
