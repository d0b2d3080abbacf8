// run_test_helpers.h — what only the run tests need; the scratch directories and file helpers they
// share with the other tests are in tests/test_support.h.
#pragma once

#include <omp.h>

namespace fp4::test {

// Sets the OpenMP thread count for a scope. The trainer's results do not depend on it (a test
// checks that); on a loaded machine one thread avoids OpenMP's barrier spinning, which turns a
// two-second test into minutes when both cores are taken.
class OmpThreads {
 public:
  explicit OmpThreads(int n) : saved_(omp_get_max_threads()) { omp_set_num_threads(n); }
  ~OmpThreads() { omp_set_num_threads(saved_); }
  OmpThreads(const OmpThreads&) = delete;
  OmpThreads& operator=(const OmpThreads&) = delete;

 private:
  int saved_;
};

}  // namespace fp4::test
