// The vector kernels in their reference order (vec.h): plain loops, one rounding per operation
// (-ffp-contract=off keeps every multiply and add separate; the attention kernels' fused steps
// are explicit std::fma), so any vectorization the compiler does gives the same bits (the
// activations' fixed_expf is branch-free for that reason). A family's CMake fragment may ask for
// the loops to be compiled once per target with KEV_CLONE_TARGETS (x86-64: AVX-512, AVX2 and the
// baseline, chosen at load time by the CPU, not by KEV_ISA).
#include "kev/cpu/vec.h"

#include <cmath>

#include "cpu/bodies/kernel_order.h"
#include "cpu/portable/gdn_columns.h"

#ifdef KEV_CLONE_TARGETS
#define KEV_CLONES __attribute__((target_clones(KEV_CLONE_TARGETS)))
#else
#define KEV_CLONES
#endif

namespace kev::vec {

KEV_CLONES float dot(const float* a, const float* b, int64_t n) {
  float acc[16] = {};
  int64_t i = 0;
  for (; i + 16 <= n; i += 16)
    for (int l = 0; l < 16; ++l) acc[l] += a[i + l] * b[i + l];
  for (int l = 0; i + l < n; ++l) acc[l] += a[i + l] * b[i + l];
  return tree16(acc);
}

KEV_CLONES float dot_fused(const float* a, const float* b, int64_t n) {
  float acc[16] = {};
  int64_t i = 0;
  for (; i + 16 <= n; i += 16)
    for (int l = 0; l < 16; ++l) acc[l] = std::fma(a[i + l], b[i + l], acc[l]);
  for (int l = 0; i + l < n; ++l) acc[l] = std::fma(a[i + l], b[i + l], acc[l]);
  return tree16(acc);
}

KEV_CLONES float sum_sq(const float* a, int64_t n) {
  float acc[16] = {};
  int64_t i = 0;
  for (; i + 16 <= n; i += 16)
    for (int l = 0; l < 16; ++l) acc[l] += a[i + l] * a[i + l];
  for (int l = 0; i + l < n; ++l) acc[l] += a[i + l] * a[i + l];
  return tree16(acc);
}

KEV_CLONES void axpy(float* y, float a, const float* x, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] += a * x[i];
}

// y[d] = fma(a[r], x[r * ld + d], y[d]) for r = 0, 1, ... in order: the repeated fused axpy,
// with a block of 64 outputs held in a fixed-size local across all rows (one load / store of y
// per block, not per row). Same operations per element in the same order.
template <int64_t B>
__attribute__((always_inline)) inline void axpy_rows_block(float* y, const float* a, const float* x,
                                                           int64_t ld, int64_t rows, int64_t w) {
  const int64_t n = B > 0 ? B : w;
  float acc[B > 0 ? B : 1];
  float* yd = B > 0 ? acc : y;
  if (B > 0)
    for (int64_t d = 0; d < n; ++d) acc[d] = y[d];
  for (int64_t r = 0; r < rows; ++r) {
    const float ar = a[r];
    const float* xr = x + r * ld;
    for (int64_t d = 0; d < n; ++d) yd[d] = std::fma(ar, xr[d], yd[d]);
  }
  if (B > 0)
    for (int64_t d = 0; d < n; ++d) y[d] = acc[d];
}

KEV_CLONES void axpy_rows(float* y, const float* a, const float* x, int64_t ld, int64_t rows,
                          int64_t n) {
  constexpr int64_t kBlock = 64;
  int64_t d0 = 0;
  for (; d0 + kBlock <= n; d0 += kBlock)
    axpy_rows_block<kBlock>(y + d0, a, x + d0, ld, rows, kBlock);
  if (d0 < n) axpy_rows_block<0>(y + d0, a, x + d0, ld, rows, n - d0);
}

KEV_CLONES void scale(float* y, float a, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] *= a;
}

KEV_CLONES float scale_max(float* y, float a, int64_t n) {
  constexpr int kLanes = 16;
  float m[kLanes];
  for (float& e : m) e = -INFINITY;
  int64_t i = 0;
  for (; i + kLanes <= n; i += kLanes)
    for (int l = 0; l < kLanes; ++l) {
      y[i + l] *= a;
      m[l] = m[l] < y[i + l] ? y[i + l] : m[l];
    }
  for (; i < n; ++i) {
    y[i] *= a;
    m[0] = m[0] < y[i] ? y[i] : m[0];
  }
  float r = m[0];
  for (int l = 1; l < kLanes; ++l) r = r < m[l] ? m[l] : r;
  return r;
}

KEV_CLONES void divide(float* y, float d, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] /= d;
}

KEV_CLONES void exp_shifted(float* y, float shift, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] = fixed_expf(y[i] - shift);
}

KEV_CLONES void silu(float* y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] = silu(y[i]);
}

KEV_CLONES void silu_mul(float* __restrict y, const float* __restrict u, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] = silu(y[i]) * u[i];
}

KEV_CLONES void mul_sigmoid(float* __restrict y, const float* __restrict g, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] = y[i] * sigmoid(g[i]);
}

KEV_CLONES void scale_mul_silu(float* __restrict y, float a, const float* __restrict w,
                               const float* __restrict g, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] = y[i] * a * w[i] * silu(g[i]);
}

KEV_CLONES void gdn_step(float* s, int64_t dk, int64_t dv, float eg, const float* k, const float* q,
                         const float* v, float beta, float* o, float* m) {
  constexpr int64_t kBlock = 64;
  int64_t j0 = 0;
  for (; j0 + kBlock <= dv; j0 += kBlock)
    gdn_columns<kBlock>(s, dk, dv, j0, kBlock, eg, k, q, v, beta, o, m);
  if (j0 < dv) gdn_columns<0>(s, dk, dv, j0, dv - j0, eg, k, q, v, beta, o, m);
}

}  // namespace kev::vec
