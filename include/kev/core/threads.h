// parallel_for(n, fn): runs fn(i) for i in [0, n) on up to `workers` threads (default: the
// hardware's). The first exception thrown by any fn is rethrown on the caller's thread after
// all workers stop; remaining items are skipped.
//
// KEV_THREADS sets the default: a whole number from 1 to kMaxThreads. check_threads_environment()
// refuses any other value with a sentence (every command and the Python module call it at start,
// as they check the ISA variables); default_workers() alone never throws and takes a refused
// value as unset.
#pragma once
#include <cstddef>
#include <cstdint>
#include <functional>

namespace kev {

inline constexpr uint64_t kMaxThreads = 1024;  // compute threads of one command or KEV_THREADS

size_t default_workers();  // KEV_THREADS if set, else std::thread::hardware_concurrency()
// Error(kBadInput) naming KEV_THREADS when it is set to anything but a whole number in
// [1, kMaxThreads] (set but empty reads as unset, as the ISA variables do).
void check_threads_environment();
void parallel_for(size_t n, const std::function<void(size_t)>& fn, size_t workers = 0);

}  // namespace kev
