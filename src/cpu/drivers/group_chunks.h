// How the GEMM drivers (int8, bf16-dot, and the x86-64 packed FP32 path's panels of 16 outputs)
// split a product's output groups over threads: in chunks of whole groups, more chunks than
// threads so uneven cores finish together: at least 4 per thread, and as many as there are runs
// of 4 groups (64 outputs) when that is more. Each run of 4 streams the activations once
// whatever the chunk, so small chunks cost nothing, while with 4 a thread the last kept the
// others waiting about half a chunk at every product (2 threads, 8k-token prefill at 0.8B
// dimensions, FP32: cores busy 95.3% of the wall time before, 97.7% after).
// Private to the kernel layer; no instruction set here.
#pragma once
#include <algorithm>
#include <cstddef>
#include <cstdint>

#include "kev/core/threads.h"

namespace kev::group_chunks {

// Runs range(g0, g1) over [0, groups) in consecutive chunks on up to `threads` threads; every
// chunk but the last is a multiple of `multiple` groups (a kernel's tile of groups, so only the
// matrix's last tile is a narrow one).
template <typename Range>
void run(int64_t groups, size_t threads, int64_t multiple, const Range& range) {
  const int64_t base = std::max<int64_t>(multiple, 4);
  const int64_t chunks = std::max(static_cast<int64_t>(threads) * 4, (groups + base - 1) / base);
  const int64_t even = std::max<int64_t>(1, (groups + chunks - 1) / chunks);
  const int64_t per = (even + multiple - 1) / multiple * multiple;
  const int64_t count = (groups + per - 1) / per;
  parallel_for(
      static_cast<size_t>(count),
      [&](size_t c) {
        const int64_t g0 = static_cast<int64_t>(c) * per, g1 = std::min(groups, g0 + per);
        range(g0, g1);
      },
      threads);
}

}  // namespace kev::group_chunks
