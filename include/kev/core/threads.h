// parallel_for(n, fn): runs fn(i) for i in [0, n) on up to `workers` threads (default: the
// hardware's). The first exception thrown by any fn is rethrown on the caller's thread after
// all workers stop; remaining items are skipped.
#pragma once
#include <cstddef>
#include <functional>

namespace kev {

size_t default_workers();  // KEV_THREADS if set, else std::thread::hardware_concurrency()
void parallel_for(size_t n, const std::function<void(size_t)>& fn, size_t workers = 0);

}  // namespace kev
