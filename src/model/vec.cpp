#include "model/vec.h"

#include <algorithm>
#include <vector>

#include "kev/core/kernel_order.h"
#include "model/gdn_neon.h"
#include "model/kernels.h"

#if KEV_X86
#include <immintrin.h>
#endif
#if KEV_ARM64
#include <arm_neon.h>
#endif

namespace kev::vec {

// x86-64 compiles the plain loops for AVX-512, AVX2 and the baseline (the same operations in the
// same order: -ffp-contract=off keeps every multiply and add separate); elsewhere once.
#if KEV_X86
#define KEV_CLONES __attribute__((target_clones("avx512f", "avx2", "default")))
#else
#define KEV_CLONES
#endif

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

namespace {

#if KEV_X86
#define KEV_AVX2 KEV_TARGET_AVX2

// One step of 32 value columns held contiguously (row i of the block at s + 32 i), with m, delta
// and o in registers (4 ymm each; the c loops unroll fully): per element the multiplies and adds
// of gdn_columns, in the same order (no FMA: each product is rounded before its add).
KEV_AVX2 void gdn_block32_step(float* s, int64_t dk, float eg, const float* k, const float* q,
                               const float* v, float beta, float* o) {
  constexpr int kVecs = 4;
  const __m256 egv = _mm256_set1_ps(eg), bv = _mm256_set1_ps(beta);
  __m256 acc[kVecs], delta[kVecs];
  for (int c = 0; c < kVecs; ++c) acc[c] = _mm256_setzero_ps();
  for (int64_t i = 0; i < dk; ++i) {  // S *= eg; m += k_i S
    float* row = s + i * 32;
    const __m256 ki = _mm256_set1_ps(k[i]);
    for (int c = 0; c < kVecs; ++c) {
      const __m256 r = _mm256_mul_ps(_mm256_loadu_ps(row + 8 * c), egv);
      _mm256_storeu_ps(row + 8 * c, r);
      acc[c] = _mm256_add_ps(acc[c], _mm256_mul_ps(ki, r));
    }
  }
  for (int c = 0; c < kVecs; ++c) {  // delta = beta (v - m); o = 0
    delta[c] = _mm256_mul_ps(bv, _mm256_sub_ps(_mm256_loadu_ps(v + 8 * c), acc[c]));
    acc[c] = _mm256_setzero_ps();
  }
  for (int64_t i = 0; i < dk; ++i) {  // S += k_i delta; o += q_i S
    float* row = s + i * 32;
    const __m256 ki = _mm256_set1_ps(k[i]), qi = _mm256_set1_ps(q[i]);
    for (int c = 0; c < kVecs; ++c) {
      const __m256 r = _mm256_add_ps(_mm256_loadu_ps(row + 8 * c), _mm256_mul_ps(ki, delta[c]));
      _mm256_storeu_ps(row + 8 * c, r);
      acc[c] = _mm256_add_ps(acc[c], _mm256_mul_ps(qi, r));
    }
  }
  for (int c = 0; c < kVecs; ++c) _mm256_storeu_ps(o + 8 * c, acc[c]);
}

// Column block by column block, every token: a block's 32 columns are copied out of the
// row-major state into a contiguous dk x 32 buffer (16 KiB at dk = 128: it stays in L1 for the
// whole sequence; in place, its rows 4 dv bytes apart fall into few cache sets), stepped through
// all tokens, and copied back. Columns past the last whole block take gdn_columns per token.
KEV_AVX2 void gdn_steps_avx2(float* s, int64_t dk, int64_t dv, int64_t len, const GdnTokens& t) {
  thread_local std::vector<float> block, scratch;
  block.resize(static_cast<size_t>(dk * 32));
  int64_t j0 = 0;
  for (; j0 + 32 <= dv; j0 += 32) {
    for (int64_t i = 0; i < dk; ++i)
      for (int64_t j = 0; j < 32; ++j) block[static_cast<size_t>(i * 32 + j)] = s[i * dv + j0 + j];
    for (int64_t n = 0; n < len; ++n)
      gdn_block32_step(block.data(), dk, t.eg[n], t.k + n * t.qkv_stride, t.q + n * t.qkv_stride,
                       t.v + n * t.qkv_stride + j0, t.beta[n], t.o + n * t.o_stride + j0);
    for (int64_t i = 0; i < dk; ++i)
      for (int64_t j = 0; j < 32; ++j) s[i * dv + j0 + j] = block[static_cast<size_t>(i * 32 + j)];
  }
  if (j0 == dv) return;
  scratch.resize(static_cast<size_t>(dv));
  for (int64_t n = 0; n < len; ++n)
    gdn_columns<0>(s, dk, dv, j0, dv - j0, t.eg[n], t.k + n * t.qkv_stride, t.q + n * t.qkv_stride,
                   t.v + n * t.qkv_stride, t.beta[n], t.o + n * t.o_stride, scratch.data());
}

// dot's lane tree on a 16-lane accumulator held as two ymm (lanes 0-7, 8-15): (l, l+8), then
// (l, l+4), (l, l+2), (0, 1), each a single rounding as in tree16.
KEV_AVX2 inline float tree16_avx2(__m256 lo, __m256 hi) {
  const __m256 t = _mm256_add_ps(lo, hi);
  const __m128 u = _mm_add_ps(_mm256_castps256_ps128(t), _mm256_extractf128_ps(t, 1));
  const __m128 v = _mm_add_ps(u, _mm_movehl_ps(u, u));
  return _mm_cvtss_f32(_mm_add_ss(v, _mm_movehdup_ps(v)));
}

// Four rows at a time against one vector: per row the 16 lane sums of dot (a product rounded,
// then added, i ascending) and its tree. n must be a multiple of 16.
KEV_AVX2 void dot_rows_avx2(const float* a, const float* x, int64_t ld, int64_t rows, int64_t n,
                            float* out) {
  int64_t r = 0;
  for (; r + 4 <= rows; r += 4) {
    const float* x0 = x + r * ld;
    const float* x1 = x0 + ld;
    const float* x2 = x1 + ld;
    const float* x3 = x2 + ld;
    __m256 l0 = _mm256_setzero_ps(), h0 = l0, l1 = l0, h1 = l0, l2 = l0, h2 = l0, l3 = l0, h3 = l0;
    for (int64_t i = 0; i < n; i += 16) {
      const __m256 al = _mm256_loadu_ps(a + i), ah = _mm256_loadu_ps(a + i + 8);
      l0 = _mm256_add_ps(l0, _mm256_mul_ps(al, _mm256_loadu_ps(x0 + i)));
      h0 = _mm256_add_ps(h0, _mm256_mul_ps(ah, _mm256_loadu_ps(x0 + i + 8)));
      l1 = _mm256_add_ps(l1, _mm256_mul_ps(al, _mm256_loadu_ps(x1 + i)));
      h1 = _mm256_add_ps(h1, _mm256_mul_ps(ah, _mm256_loadu_ps(x1 + i + 8)));
      l2 = _mm256_add_ps(l2, _mm256_mul_ps(al, _mm256_loadu_ps(x2 + i)));
      h2 = _mm256_add_ps(h2, _mm256_mul_ps(ah, _mm256_loadu_ps(x2 + i + 8)));
      l3 = _mm256_add_ps(l3, _mm256_mul_ps(al, _mm256_loadu_ps(x3 + i)));
      h3 = _mm256_add_ps(h3, _mm256_mul_ps(ah, _mm256_loadu_ps(x3 + i + 8)));
    }
    out[r] = tree16_avx2(l0, h0);
    out[r + 1] = tree16_avx2(l1, h1);
    out[r + 2] = tree16_avx2(l2, h2);
    out[r + 3] = tree16_avx2(l3, h3);
  }
  for (; r < rows; ++r) {
    const float* xr = x + r * ld;
    __m256 lo = _mm256_setzero_ps(), hi = lo;
    for (int64_t i = 0; i < n; i += 16) {
      lo = _mm256_add_ps(lo, _mm256_mul_ps(_mm256_loadu_ps(a + i), _mm256_loadu_ps(xr + i)));
      hi =
          _mm256_add_ps(hi, _mm256_mul_ps(_mm256_loadu_ps(a + i + 8), _mm256_loadu_ps(xr + i + 8)));
    }
    out[r] = tree16_avx2(lo, hi);
  }
}

#endif  // KEV_X86

#if KEV_ARM64
// dot's lane tree on a 16-lane accumulator held as four quads (lanes 4q .. 4q+3): (l, l+8) is
// quads (0, 2) and (1, 3), (l, l+4) the two results, then (l, l+2), (0, 1).
inline float tree16_neon(const float32x4_t (&q)[4]) {
  const float32x4_t s4 = vaddq_f32(vaddq_f32(q[0], q[2]), vaddq_f32(q[1], q[3]));
  const float32x2_t s2 = vadd_f32(vget_low_f32(s4), vget_high_f32(s4));
  return vget_lane_f32(s2, 0) + vget_lane_f32(s2, 1);
}

// Two rows at a time against one vector: per row the 16 lane sums of dot (a product rounded,
// then added: FMUL then FADD, never FMLA; i ascending) and its tree. n must be a multiple of 16.
void dot_rows_neon(const float* a, const float* x, int64_t ld, int64_t rows, int64_t n,
                   float* out) {
  int64_t r = 0;
  for (; r + 2 <= rows; r += 2) {
    const float* x0 = x + r * ld;
    const float* x1 = x0 + ld;
    float32x4_t s0[4], s1[4];
    for (int q = 0; q < 4; ++q) s0[q] = s1[q] = vdupq_n_f32(0.0f);
    for (int64_t i = 0; i < n; i += 16)
      for (int q = 0; q < 4; ++q) {
        const float32x4_t av = vld1q_f32(a + i + 4 * q);
        s0[q] = vaddq_f32(s0[q], vmulq_f32(av, vld1q_f32(x0 + i + 4 * q)));
        s1[q] = vaddq_f32(s1[q], vmulq_f32(av, vld1q_f32(x1 + i + 4 * q)));
      }
    out[r] = tree16_neon(s0);
    out[r + 1] = tree16_neon(s1);
  }
  for (; r < rows; ++r) {
    const float* xr = x + r * ld;
    float32x4_t s0[4];
    for (int q = 0; q < 4; ++q) s0[q] = vdupq_n_f32(0.0f);
    for (int64_t i = 0; i < n; i += 16)
      for (int q = 0; q < 4; ++q)
        s0[q] = vaddq_f32(s0[q], vmulq_f32(vld1q_f32(a + i + 4 * q), vld1q_f32(xr + i + 4 * q)));
    out[r] = tree16_neon(s0);
  }
}
#endif  // KEV_ARM64

}  // namespace

void dot_rows_isa(Isa isa, const float* a, const float* x, int64_t ld, int64_t rows, int64_t n,
                  float* out) {
#if KEV_X86
  if (isa != Isa::kPortable && n % 16 == 0) return dot_rows_avx2(a, x, ld, rows, n, out);
#elif KEV_ARM64
  if (isa == Isa::kNeon && n % 16 == 0) return dot_rows_neon(a, x, ld, rows, n, out);
#else
  (void)isa;
#endif
  for (int64_t r = 0; r < rows; ++r) out[r] = dot(a, x + r * ld, n);
}

void dot_rows(const float* a, const float* x, int64_t ld, int64_t rows, int64_t n, float* out) {
  dot_rows_isa(model_kernels().vec_isa(), a, x, ld, rows, n, out);
}

void gdn_steps_isa(Isa isa, float* s, int64_t dk, int64_t dv, int64_t len, const GdnTokens& t) {
#if KEV_X86
  if (isa != Isa::kPortable) return gdn_steps_avx2(s, dk, dv, len, t);
#elif KEV_ARM64
  if (isa == Isa::kNeon) return gdn_steps_neon(s, dk, dv, len, t);
#else
  (void)isa;
#endif
  std::vector<float> m(static_cast<size_t>(dv));
  for (int64_t n = 0; n < len; ++n)
    gdn_step(s, dk, dv, t.eg[n], t.k + n * t.qkv_stride, t.q + n * t.qkv_stride,
             t.v + n * t.qkv_stride, t.beta[n], t.o + n * t.o_stride, m.data());
}

void gdn_steps(float* s, int64_t dk, int64_t dv, int64_t len, const GdnTokens& t) {
  gdn_steps_isa(model_kernels().vec_isa(), s, dk, dv, len, t);
}

}  // namespace kev::vec
