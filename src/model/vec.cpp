#include "model/vec.h"

namespace kev::vec {

#define KEV_CLONES __attribute__((target_clones("avx512f", "avx2", "default")))

namespace {
inline float tree16(const float* l) {
  float t[8], u[4], v[2];
  for (int i = 0; i < 8; ++i) t[i] = l[i] + l[i + 8];
  for (int i = 0; i < 4; ++i) u[i] = t[i] + t[i + 4];
  for (int i = 0; i < 2; ++i) v[i] = u[i] + u[i + 2];
  return v[0] + v[1];
}
}  // namespace

KEV_CLONES float dot(const float* a, const float* b, int64_t n) {
  float acc[16] = {};
  int64_t i = 0;
  for (; i + 16 <= n; i += 16)
    for (int l = 0; l < 16; ++l) acc[l] += a[i + l] * b[i + l];
  for (int l = 0; i + l < n; ++l) acc[l] += a[i + l] * b[i + l];
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

// y[d] += a[r] * x[r * ld + d] for r = 0, 1, ... in order: the repeated axpy, with a block of
// 64 outputs held in a fixed-size local across all rows (one load / store of y per block, not
// per row). Same operations per element in the same order.
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
    for (int64_t d = 0; d < n; ++d) yd[d] += ar * xr[d];
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

// Every value column j of the state is independent within a step (m[j], delta[j], o[j] and
// column j of S involve only column j), so the step runs column block by column block, a block
// of 64 columns with its m / delta / o held in fixed-size locals (vectorized without aliasing
// concerns; the dk x 64 block, 32 KiB at dk = 128, is re-read by the second pass while still
// cached); a last narrower block takes the runtime-width loop. Per element the operations and
// their order are the unblocked ones: S *= eg; m += k_i S (ascending i); delta = beta (v - m);
// S += k_i delta; o += q_i S (ascending i).
template <int64_t B>
__attribute__((always_inline)) inline void gdn_columns(float* s, int64_t dk, int64_t dv, int64_t j0,
                                                       int64_t jn, float eg, const float* k,
                                                       const float* q, const float* v, float beta,
                                                       float* o, float* m) {
  const int64_t w = B > 0 ? B : jn;
  float mb[B > 0 ? B : 1], ob[B > 0 ? B : 1];
  float* md = B > 0 ? mb : m + j0;
  float* od = B > 0 ? ob : o + j0;
  for (int64_t j = 0; j < w; ++j) md[j] = 0.0f;
  for (int64_t i = 0; i < dk; ++i) {
    float* row = s + i * dv + j0;
    const float ki = k[i];
    for (int64_t j = 0; j < w; ++j) {
      row[j] *= eg;
      md[j] += ki * row[j];
    }
  }
  for (int64_t j = 0; j < w; ++j) {
    md[j] = beta * (v[j0 + j] - md[j]);  // md now holds delta
    od[j] = 0.0f;
  }
  for (int64_t i = 0; i < dk; ++i) {
    float* row = s + i * dv + j0;
    const float ki = k[i], qi = q[i];
    for (int64_t j = 0; j < w; ++j) {
      row[j] += ki * md[j];
      od[j] += qi * row[j];
    }
  }
  if (B > 0)
    for (int64_t j = 0; j < w; ++j) o[j0 + j] = od[j], m[j0 + j] = md[j];
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
