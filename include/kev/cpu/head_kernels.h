// The pointer head's kernel table (kernel layer; the head's math and its order of operations are
// stated in include/kev/head/pointer_head.h). One variant per level of the architecture the
// binary is built for (portable; x86-64: AVX2+FMA, AVX-512F; aarch64: NEON), all one body over a
// 16-lane vector type (src/cpu/bodies/head_kernels_body.inc) with the same per-element order of
// operations, so every variant, block size and thread split gives bit-identical results.
// Thread safety: every function may be called from any thread.
#pragma once
#include <cstddef>

#include "kev/cpu/isa.h"

namespace kev {

// The kernel variant used by default: the best this CPU supports, capped by KEV_HEAD_ISA /
// KEV_ISA (kev/cpu/isa.h); read once per process. Every variant is bit-identical; passing
// another supported one is for tests and benchmarks, an unsupported one throws kUnsupported.
Isa head_isa();

namespace head_kernels {

// The most questions one block call handles at once (their W_q / W_k loads are shared).
inline constexpr size_t kMaxBlock = 8;

struct KernelSet {
  // u[q][k] = dot16(W[k,:], h[q]) + b[k] for k < p, q < nq (nq <= kMaxBlock).
  void (*project)(const float* w, const float* b, size_t p, size_t d, const float* const* h,
                  size_t nq, float* const* u);
  // v[q][j] = sum over k ascending of u[q][k] * W[k,j] (FMA) for j < n, q < nq; rows of W are
  // `stride` floats apart (a column range of a [p, d] matrix: w + j0, stride d).
  void (*fold)(const float* w, size_t p, size_t stride, size_t n, const float* const* u, size_t nq,
               float* const* v);
  // dot16(a, b) over n elements.
  float (*dot)(const float* a, const float* b, size_t n);
  // out[i] = (dot16(rows[i,:], v) + c) * scale for i < count (rows are d floats each).
  void (*logits)(const float* rows, size_t count, size_t d, const float* v, float c, float scale,
                 float* out);
};

// The kernels for `isa`. Throws Error(kUnsupported) if this CPU cannot run the requested variant.
const KernelSet& kernels(Isa isa);

}  // namespace head_kernels
}  // namespace kev
