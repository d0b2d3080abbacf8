// parallel.h — runs independent tasks 0..n-1 on a few threads. Results must not depend on the
// thread count: each task writes only its own slot (indexed by the task), and callers reduce the
// slots in index order afterwards. A task that throws stops the others from starting new tasks;
// the first exception (by task index) is rethrown on the calling thread.
#pragma once

#include <algorithm>
#include <atomic>
#include <cstddef>
#include <exception>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace fp4::fit {

// The number of worker threads to use when the caller asked for `requested` (0: one per core).
inline int resolve_threads(int requested) {
  if (requested > 0) return requested;
  const unsigned cores = std::thread::hardware_concurrency();
  return cores == 0 ? 1 : static_cast<int>(cores);
}

// Calls make_worker() once per thread (per-thread state: a solver with its own buffers), then
// work(state, i) for every i in [0, n). The calling thread is one of the workers.
template <typename MakeWorker, typename Work>
void parallel_for(size_t n, int threads, MakeWorker make_worker, Work work) {
  const size_t workers = std::min<size_t>(static_cast<size_t>(std::max(1, threads)), std::max<size_t>(n, 1));
  std::atomic<size_t> next{0};
  std::atomic<bool> failed{false};
  std::mutex error_mutex;
  size_t error_index = n;
  std::exception_ptr error;
  auto run = [&] {
    try {
      auto state = make_worker();
      for (;;) {
        if (failed.load()) return;
        const size_t i = next.fetch_add(1);
        if (i >= n) return;
        try {
          work(state, i);
        } catch (...) {
          std::lock_guard<std::mutex> lock(error_mutex);
          if (i < error_index) {
            error_index = i;
            error = std::current_exception();
          }
          failed = true;
        }
      }
    } catch (...) {  // make_worker itself failed
      std::lock_guard<std::mutex> lock(error_mutex);
      if (!error) error = std::current_exception();
      failed = true;
    }
  };
  std::vector<std::thread> pool;
  for (size_t t = 1; t < workers; ++t) pool.emplace_back(run);
  run();
  for (std::thread& t : pool) t.join();
  if (error) std::rethrow_exception(error);
}

}  // namespace fp4::fit
