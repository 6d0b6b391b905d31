#include "kev/core/threads.h"

#include <atomic>
#include <cstdlib>
#include <exception>
#include <mutex>
#include <thread>
#include <vector>

namespace kev {

size_t default_workers() {
  if (const char* v = std::getenv("KEV_THREADS")) {
    long n = std::strtol(v, nullptr, 10);
    if (n > 0) return static_cast<size_t>(n);
  }
  unsigned hc = std::thread::hardware_concurrency();
  return hc ? hc : 1;
}

void parallel_for(size_t n, const std::function<void(size_t)>& fn, size_t workers) {
  if (workers == 0) workers = default_workers();
  if (workers > n) workers = n;
  if (workers <= 1) {
    for (size_t i = 0; i < n; ++i) fn(i);
    return;
  }
  std::atomic<size_t> next{0};
  std::atomic<bool> stop{false};
  std::exception_ptr error;
  std::mutex error_mutex;
  auto work = [&] {
    while (!stop) {
      size_t i = next++;
      if (i >= n) return;
      try {
        fn(i);
      } catch (...) {
        std::lock_guard lock(error_mutex);
        if (!error) error = std::current_exception();
        stop = true;
      }
    }
  };
  std::vector<std::thread> threads;
  for (size_t t = 1; t < workers; ++t) threads.emplace_back(work);
  work();
  for (auto& t : threads) t.join();
  if (error) std::rethrow_exception(error);
}

}  // namespace kev
