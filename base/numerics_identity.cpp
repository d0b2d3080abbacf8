// numerics_identity.cpp — see numerics_identity.h. The tables below are main's history up to the
// commit that began recording identities, each commit by the first 12 hex digits of its hash
// (unique in that history), sorted; tests/test_golden_bits.cpp checks them against git where the
// source is a git checkout (`git merge-base --is-ancestor 5ac9441 COMMIT` decides 2 against 1).
// Commits after that one never need the table: their runs record the identity themselves.
#include "base/numerics_identity.h"

#include <algorithm>
#include <iterator>
#include <string_view>

namespace fp4 {

namespace {

// Identity 1: the commits before 5ac9441.
constexpr std::string_view kIdentity1[] = {
    "0131fcf1209a", "032d6272c7bc", "0384f26b94a4", "04416a98bc16", "04c4558133c5", "059645f0fd1d",
    "05cdd733ed0d", "05f511568cd7", "0686445bc7ea", "08fa3619b383", "0a06221a4355", "0a8ea0b6da22",
    "0adb76e3bb9e", "0cb2110e1617", "0de909269a99", "0efc0e5b434b", "0f485f407a2c", "1035b5cac6c4",
    "11275e2cbb83", "117fded7aaac", "16a21af09e25", "17bf663fc2e4", "184d02e137bf", "18c24a789779",
    "1a89bd28ec7d", "1c7b68f0c874", "1dd359971e38", "1f2c46cce29c", "1f7b37233851", "216266b4a546",
    "21dcb51c1494", "25d8d409308e", "2613ced82d2c", "277fdfea192d", "27974b1bc5df", "2865deaaf159",
    "2872083589a6", "2950f9a31838", "2a9064c02af8", "2ae69db81652", "2b96eb7d38e6", "2bd0b19e6d9f",
    "2d8afee2debd", "2dd24b74a1a3", "3217097df195", "3218f1865b94", "377428c21325", "37860aa3a848",
    "37f6db07a3ee", "384818547034", "3915390da492", "3afb22350cf3", "3b02f9666477", "3bf084398fd1",
    "41bfd107e9f5", "42ba07eeea6d", "434c593ae3a5", "472f34525a04", "498411408fd8", "4a688d32236a",
    "4c320d0900a7", "4cd093e2f881", "4dbea0102598", "4ebd2ba417c9", "4f5fc1c4179a", "518521571de9",
    "526033ceb099", "5481741f9ad5", "561285946d54", "5631215bb0c7", "5b16a247ec10", "5d595e02f62a",
    "5d5d735715f8", "5e6c61605d9b", "5ebd9d125777", "5efe6f757f38", "5f5d55b174fa", "60ae871955c0",
    "61fbfbbba63d", "6246ff55ad1d", "627769b5d2a0", "62a9b5f1a587", "6384ed3ee0bc", "64684c5b481c",
    "680832530170", "6941ab6138fe", "6ad07d115fa7", "6b3c5843c4f7", "6d48bea81bea", "6e119b1a2f60",
    "6ed75926a86c", "6f49fb07fb32", "6f52f9c97225", "6fe6d5af735a", "72c1dcaf81fe", "754540e92a42",
    "758252aa0097", "767158f18a28", "797c9acdeb20", "7bfb2b195472", "7cf006438e36", "7d41e4f771f6",
    "7e840859dc7b", "7f16daeccca1", "7f22b348fbd9", "7fb8e1792f72", "816fae1bfbe9", "81ffc5477af2",
    "825917849b0f", "82bc58aef8d4", "84ce36082f42", "85ad29a6b118", "876e2eaad1ca", "8d4f6c1c007a",
    "8dcc8d9fd107", "8ddfdcd009ca", "8de04ece6660", "8f8da1b0a4d6", "909a02736763", "944405b6d0e3",
    "958425f5a8db", "969551f62818", "972f6a05e641", "973083a428fb", "9881fb59403a", "9b0f429eab6a",
    "9c177ee2b420", "9d445eecddad", "9df161179b99", "9fc30d3af581", "9fca80af6a3f", "a0525ff5a363",
    "a1c9be5e0089", "a24b358a1e0a", "a3ff411a2e35", "a5437090cd47", "a620a869a5bd", "a7f1ba32db89",
    "a8a761f8ca97", "a96d93ae6a3f", "ab034e646109", "ab3336ae8264", "adc83b6a77da", "aded5a7715cb",
    "af82e9519269", "b08c259bebf7", "b1babe9fa8cf", "b291847d27f9", "b464409f78d7", "b49d9923a56c",
    "b4bfef5d51ef", "b603bc1ce831", "bc1309ae63c7", "bc650f7ee126", "bc767fda3f36", "bcbc5ec91e89",
    "bdaf37f9ba9f", "be040d56b08b", "bf8d98fa103b", "bfacc118e07a", "bfe29e267029", "c3db9d34f4cd",
    "c42882f13cd8", "c4390e1b2ccf", "c4666358dc7e", "c55c2dfb9f85", "c6019c312ca4", "c8069f6aff49",
    "c8de1d878737", "c999fae012fd", "ca6c4932ba58", "cacee76982d6", "cbe700817d07", "cc4f68e45ed5",
    "cd820d4568fd", "ce690e20ad59", "cefc2dcc4cd5", "cf3002aa2cad", "d029fd3990b7", "d0ca9b0ddd31",
    "d16bd554cdfb", "d263570c561d", "d29f640c0bdc", "d2af9f79db21", "d33a99d2093c", "d3783a2ebb35",
    "d707267b02ee", "d81d67f728c0", "d9a1321c12cc", "dcba336197ee", "dcc990218818", "dd1d4f83985a",
    "dd222afac889", "e1bf2bf3b06d", "e23a01608e62", "e240be3357a3", "e3b01b04fa2c", "e528f15152a5",
    "e558d954e4cb", "e5dc44b0bc7c", "e650c6d155f4", "e73c5ab9d1b5", "e784864422cf", "eac199fa625f",
    "eda970afaf96", "efdb4fcc84e0", "f3ab30e95d53", "f3ca7af6e619", "f412a715914f", "f4984f04c5c8",
    "f5037a0b4f7c", "f654994fcc95", "f6fce5a15841", "f943f9e55bc6", "f9999596b699", "facb19d3d0e9",
    "fb6696a89a6d", "fd599cb81276", "ff9dcbe93a4c",
};

// Identity 2: 5ac9441 and the commits after it, up to the one that began recording identities.
constexpr std::string_view kIdentity2[] = {
    "014796f885ca", "01a2bf327dc7", "03f029d1ca16", "05b7085ecb21", "06490adb4ab1", "071a30b0217b",
    "0dc71ea0ed40", "0de6e7ee0c96", "0f46ea4936e2", "108fb6d96cac", "17e35f50c052", "188a53a89ca1",
    "199338a2c955", "1bfaaba72b96", "1f4711bd87e0", "2590ae1e2780", "28a48dc080f3", "2b83b18591b8",
    "39aae192517d", "3beb18d04256", "417c3c77f274", "41cbae7d0ca0", "480ad17c5382", "483e75667d80",
    "488d3356d23d", "4adb45551952", "4ccc57e6c892", "4df881fdd34a", "4fd8796578e1", "52ad9e3d4f41",
    "5455e50345e9", "54ff56c4dd11", "5577d8d6ae97", "574d7f0285a3", "5ac944153817", "5f0b1c4e4af0",
    "5f4715fbae3e", "611c176bff3b", "644c168977e4", "64ea94fd9afd", "6778eb3aa079", "6a720c96b56a",
    "6c996ee92358", "6ced3c09db0a", "6e87ea866f48", "72795fc315e6", "74956f778fd4", "7813cb24ce8c",
    "7a49e47d8597", "8142404edda3", "82034640f80a", "8676631348f9", "893fd905dba5", "89b58e2d0866",
    "89fe192e79e1", "8f15f216ccf2", "8f5a309a437e", "8f8d73a25c9f", "9225e813ff41", "943309a8747d",
    "9695450547db", "98861a304e76", "9a7209052e12", "a2c23d18ffab", "a39b0c1ad054", "a433b69713e0",
    "a76bbee52021", "a79b75c3c57f", "ab1a42d50abb", "acc364dbf286", "aebbb4e91f3d", "b0ebd574a5f6",
    "b1c63e98698c", "b334f98d2a7c", "ba9d94c6af35", "c17755301162", "c3d8d4f8bd63", "cb57d6572347",
    "cf60cd3c7c59", "d14d018bef6b", "d320d3fe1f8a", "d70699e3f5e1", "ddb1b9970cba", "e347c967beed",
    "f5211c425fe8", "f77d4446fb82", "fbefcc54d5bb", "ffb27c4670d4",
};

constexpr size_t kPrefix = 12;

bool in_table(const std::string_view* begin, const std::string_view* end, std::string_view commit) {
  // A shorter prefix (at least 7 digits, as git abbreviates) names a commit when exactly one entry
  // starts with it.
  const std::string_view key = commit.substr(0, std::min(commit.size(), kPrefix));
  const auto lo = std::lower_bound(begin, end, key);
  return lo != end && lo->substr(0, key.size()) == key &&
         (std::next(lo) == end || std::next(lo)->substr(0, key.size()) != key);
}

}  // namespace

int numerics_identity_of_commit(std::string_view git_commit) {
  const auto lower_hex = [](char c) { return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'); };
  if (git_commit.size() < 7 || !std::all_of(git_commit.begin(), git_commit.end(), lower_hex)) return 0;
  const bool one = in_table(std::begin(kIdentity1), std::end(kIdentity1), git_commit);
  const bool two = in_table(std::begin(kIdentity2), std::end(kIdentity2), git_commit);
  if (one == two) return 0;  // neither, or a prefix too short to tell the two tables apart
  return one ? 1 : 2;
}

}  // namespace fp4
