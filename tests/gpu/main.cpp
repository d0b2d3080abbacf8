// The Catch2 runner for the [gpu] tests. Listing the tests (what catch_discover_tests does at build
// time) works anywhere; running them on a machine without a CUDA device prints why and exits 77,
// which ctest reports as skipped.
#define CATCH_CONFIG_RUNNER
#include <catch2/catch.hpp>
#include <cuda_runtime.h>

#include <cstdio>
#include <string_view>

int main(int argc, char** argv) {
  bool listing = false;
  for (int i = 1; i < argc; ++i)
    if (std::string_view(argv[i]).rfind("--list", 0) == 0) listing = true;
  if (!listing) {
    int devices = 0;
    if (cudaGetDeviceCount(&devices) != cudaSuccess || devices == 0) {
      std::printf("no CUDA device: [gpu] tests skipped\n");
      return 77;
    }
  }
  return Catch::Session().run(argc, argv);
}
