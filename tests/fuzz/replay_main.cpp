// replay_main.cpp — `fp4lab_fuzz_replay TARGET DIR...`: runs TARGET's entry point on every file
// under the DIRs (the seed corpus and the kept crash inputs), as the fuzzer would. Exits 1 naming
// each input that made it throw anything but the reader's own refusal, 2 for bad arguments.
#include <cstdio>
#include <exception>
#include <filesystem>
#include <string>
#include <vector>

#include "base/files.h"
#include "tests/fuzz/entry_points.h"

int main(int argc, char** argv) {
  if (argc < 3) {
    std::fprintf(stderr, "usage: fp4lab_fuzz_replay TARGET DIR...\n");
    return 2;
  }
  const std::string name = argv[1];
  fp4::fuzz::EntryPoint run = nullptr;
  for (const auto& t : fp4::fuzz::targets())
    if (name == t.name) run = t.run;
  if (run == nullptr) {
    std::fprintf(stderr, "fp4lab_fuzz_replay: unknown target %s\n", name.c_str());
    return 2;
  }
  std::vector<std::filesystem::path> inputs;
  for (int i = 2; i < argc; ++i) {
    std::error_code ec;
    if (!std::filesystem::is_directory(argv[i], ec)) continue;
    for (const auto& e : std::filesystem::recursive_directory_iterator(argv[i]))
      if (e.is_regular_file() && e.path().filename() != "README.md") inputs.push_back(e.path());
  }
  int failures = 0;
  for (const auto& path : inputs) {
    const std::string bytes = fp4::read_file(path);
    try {
      run(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size());
    } catch (const std::exception& e) {
      std::printf("FAILED %s: %s\n", path.c_str(), e.what());
      ++failures;
    }
  }
  std::printf("%s: %zu inputs, %d failed\n", name.c_str(), inputs.size(), failures);
  if (inputs.empty()) return 1;  // a target without a corpus proves nothing
  return failures == 0 ? 0 : 1;
}
