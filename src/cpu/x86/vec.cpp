// The x86-64 vector kernels (vec.h's order, bit-identical to the portable loops): AVX2 forms of
// dot_rows, dot_block, axpy_block and gdn_steps; AVX-512 forms of dot_rows, dot_block, axpy_block
// and gdn_steps (64-column blocks where they fit L1, else the AVX2 form's). The attention kernels'
// steps are FMAs (vfmadd: one rounding, as std::fma in the portable loops); gdn_steps has none.
#include <unistd.h>

#include <algorithm>
#include <vector>

#include "cpu/arch.h"
#include "cpu/portable/gdn_columns.h"
#include "cpu/x86/levels.h"
#include "cpu/x86/target.h"
#include "cpu/x86/tree16.h"
#include "kev/cpu/vec.h"

namespace kev::arch {
namespace {

using vec::gdn_columns;
using vec::GdnTokens;

#define KEV_AVX2 KEV_TARGET_AVX2

// One 64-byte line into L1. An asm statement, not _mm_prefetch: GCC deletes a loop of
// __builtin_prefetch calls once it is inlined into another loop (a loop with no effect to it).
inline void prefetch_line(const float* p) {
  asm volatile("prefetcht0 %0" : : "m"(*reinterpret_cast<const char*>(p)));
}

// `count` rows of n floats, ld apart, from `at`, prefetched a few lines per step() over `steps`
// calls, so that they are in L1 when the kernel reaches them (a long state's keys and values come
// from memory; prefetches change no result). Each row's lines from its start, then its last float
// (the tail line when the row is not line-aligned). Both levels' dot_block (the next tile's keys)
// and the AVX2 axpy_block (the next slice's values) use it.
class RowPrefetch {
 public:
  RowPrefetch(const float* at, int64_t ld, int64_t count, int64_t n, int64_t steps)
      : at_(at),
        ld_(ld),
        n_(n),
        per_row_(n / 16 + 1),
        total_(count * per_row_),
        per_step_(steps > 0 ? (total_ + steps - 1) / steps : 0) {}
  void step() {
    for (int64_t k = 0; k < per_step_ && next_ < total_; ++k, ++next_) {
      const int64_t line = next_ % per_row_;
      prefetch_line(at_ + next_ / per_row_ * ld_ + (line + 1 < per_row_ ? 16 * line : n_ - 1));
    }
  }

 private:
  const float* at_;
  int64_t ld_, n_, per_row_, total_, per_step_, next_ = 0;
};

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

// Token n's k and q and its 32 values from column j0 into L1. A token's projections are one
// row of the layer's [tokens x channels] buffer (24 KiB apart at 0.8B dimensions), so the
// hardware prefetcher does not follow from token to token, and without this each step waited
// on those lines (about half the step's time in a long prefill's profile).
template <int W>
inline void prefetch_token(const GdnTokens& t, int64_t n, int64_t dk, int64_t j0) {
  const float *k = t.k + n * t.qkv_stride, *q = t.q + n * t.qkv_stride;
  for (int64_t i = 0; i < dk; i += 16) {
    prefetch_line(k + i);
    prefetch_line(q + i);
  }
  const float* v = t.v + n * t.qkv_stride + j0;
  for (int j = 0; j < W; j += 16) prefetch_line(v + j);
  prefetch_line(v + W - 1);
}

// Columns [j0, j0 + W) stepped through every token in a contiguous dk x W buffer: copied out of
// the row-major state, stepped by step(block, token) with the next token's inputs prefetched
// during each step, and copied back.
template <int W, class Step>
inline void gdn_block_steps(float* s, int64_t dk, int64_t dv, int64_t j0, int64_t len,
                            const GdnTokens& t, std::vector<float>& block, Step step) {
  block.resize(static_cast<size_t>(dk * W));
  for (int64_t i = 0; i < dk; ++i)
    for (int64_t j = 0; j < W; ++j) block[static_cast<size_t>(i * W + j)] = s[i * dv + j0 + j];
  if (len > 0) prefetch_token<W>(t, 0, dk, j0);
  for (int64_t n = 0; n < len; ++n) {
    if (n + 1 < len) prefetch_token<W>(t, n + 1, dk, j0);
    step(block.data(), n);
  }
  for (int64_t i = 0; i < dk; ++i)
    for (int64_t j = 0; j < W; ++j) s[i * dv + j0 + j] = block[static_cast<size_t>(i * W + j)];
}

// The columns from j0 on, token by token (gdn_columns: the partial block's form).
inline void gdn_rest_columns(float* s, int64_t dk, int64_t dv, int64_t j0, int64_t len,
                             const GdnTokens& t, std::vector<float>& scratch) {
  if (j0 == dv) return;
  scratch.resize(static_cast<size_t>(dv));
  for (int64_t n = 0; n < len; ++n)
    gdn_columns<0>(s, dk, dv, j0, dv - j0, t.eg[n], t.k + n * t.qkv_stride, t.q + n * t.qkv_stride,
                   t.v + n * t.qkv_stride, t.beta[n], t.o + n * t.o_stride, scratch.data());
}

// Column block by column block, every token: a block's 32 columns are copied out of the
// row-major state into a contiguous dk x 32 buffer (16 KiB at dk = 128: it stays in L1 for the
// whole sequence; in place, its rows 4 dv bytes apart fall into few cache sets), stepped through
// all tokens (the next token's inputs prefetched during each step), and copied back. Columns
// past the last whole block take gdn_columns per token.
KEV_AVX2 void gdn_blocks32_from(float* s, int64_t dk, int64_t dv, int64_t j0, int64_t len,
                                const GdnTokens& t) {
  thread_local std::vector<float> block, scratch;
  for (; j0 + 32 <= dv; j0 += 32)
    gdn_block_steps<32>(s, dk, dv, j0, len, t, block, [&](float* b, int64_t n) {
      gdn_block32_step(b, dk, t.eg[n], t.k + n * t.qkv_stride, t.q + n * t.qkv_stride,
                       t.v + n * t.qkv_stride + j0, t.beta[n], t.o + n * t.o_stride + j0);
    });
  gdn_rest_columns(s, dk, dv, j0, len, t, scratch);
}

KEV_AVX2 void gdn_steps_avx2(float* s, int64_t dk, int64_t dv, int64_t len, const GdnTokens& t) {
  gdn_blocks32_from(s, dk, dv, 0, len, t);
}

// Four rows at a time against one vector: per row the 16 lane sums of dot_fused (one FMA a
// step, i ascending) and its tree. n must be a multiple of 16.
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
      l0 = _mm256_fmadd_ps(al, _mm256_loadu_ps(x0 + i), l0);
      h0 = _mm256_fmadd_ps(ah, _mm256_loadu_ps(x0 + i + 8), h0);
      l1 = _mm256_fmadd_ps(al, _mm256_loadu_ps(x1 + i), l1);
      h1 = _mm256_fmadd_ps(ah, _mm256_loadu_ps(x1 + i + 8), h1);
      l2 = _mm256_fmadd_ps(al, _mm256_loadu_ps(x2 + i), l2);
      h2 = _mm256_fmadd_ps(ah, _mm256_loadu_ps(x2 + i + 8), h2);
      l3 = _mm256_fmadd_ps(al, _mm256_loadu_ps(x3 + i), l3);
      h3 = _mm256_fmadd_ps(ah, _mm256_loadu_ps(x3 + i + 8), h3);
    }
    out[r] = x86::tree16(l0, h0);
    out[r + 1] = x86::tree16(l1, h1);
    out[r + 2] = x86::tree16(l2, h2);
    out[r + 3] = x86::tree16(l3, h3);
  }
  for (; r < rows; ++r) {
    const float* xr = x + r * ld;
    __m256 lo = _mm256_setzero_ps(), hi = lo;
    for (int64_t i = 0; i < n; i += 16) {
      lo = _mm256_fmadd_ps(_mm256_loadu_ps(a + i), _mm256_loadu_ps(xr + i), lo);
      hi = _mm256_fmadd_ps(_mm256_loadu_ps(a + i + 8), _mm256_loadu_ps(xr + i + 8), hi);
    }
    out[r] = x86::tree16(lo, hi);
  }
}

// A load kept in a register: the empty asm stops GCC from folding it into each FMA that reads
// it (in lane_half_2x4 that would be 10 loads per 8 FMAs instead of 6, and a third slower).
KEV_AVX2 __attribute__((always_inline)) inline __m256 load_once(const float* p) {
  __m256 v = _mm256_loadu_ps(p);
  __asm__("" : "+x"(v));
  return v;
}

// One half of the 16 lane sums of dot_fused for two vectors a0, a1 against four rows x0..x3:
// lanes off .. off + 7 (off 0: lanes 0-7, off 8: lanes 8-15), i ascending, one FMA a step.
// acc[4 * r + c] is (a_r, x_c). n must be a multiple of 16.
KEV_AVX2 __attribute__((always_inline)) inline void lane_half_2x4(const float* a0, const float* a1,
                                                                  const float* x0, const float* x1,
                                                                  const float* x2, const float* x3,
                                                                  int64_t n, int64_t off,
                                                                  __m256* acc) {
  __m256 c00 = _mm256_setzero_ps(), c01 = c00, c02 = c00, c03 = c00, c10 = c00, c11 = c00,
         c12 = c00, c13 = c00;
  for (int64_t i = off; i < n; i += 16) {
    const __m256 u = _mm256_loadu_ps(a0 + i), w = _mm256_loadu_ps(a1 + i);
    __m256 v = load_once(x0 + i);
    c00 = _mm256_fmadd_ps(u, v, c00);
    c10 = _mm256_fmadd_ps(w, v, c10);
    v = load_once(x1 + i);
    c01 = _mm256_fmadd_ps(u, v, c01);
    c11 = _mm256_fmadd_ps(w, v, c11);
    v = load_once(x2 + i);
    c02 = _mm256_fmadd_ps(u, v, c02);
    c12 = _mm256_fmadd_ps(w, v, c12);
    v = load_once(x3 + i);
    c03 = _mm256_fmadd_ps(u, v, c03);
    c13 = _mm256_fmadd_ps(w, v, c13);
  }
  acc[0] = c00, acc[1] = c01, acc[2] = c02, acc[3] = c03;
  acc[4] = c10, acc[5] = c11, acc[6] = c12, acc[7] = c13;
}

// The trees of the 8 dots of a 2 x 4 tile at once (each add the one tree16 does for its dot, on
// the same two operands: the shuffles only move lanes). lo[r * 4 + c] / hi[r * 4 + c] hold dot
// (r, c)'s lanes 0-7 / 8-15; on return lanes 4r .. 4r + 3 hold dots (r, 0) .. (r, 3). Per step
// the same lane pairs as tree16: (l, l + 8), (l, l + 4), (l, l + 2), (0, 1).
KEV_AVX2 inline __m256 trees16x8(const __m256* lo, const __m256* hi) {
  // Dots in the order that leaves (0, 0..3) in the low half of the result, (1, 0..3) the high.
  constexpr int kOrder[8] = {0, 4, 1, 5, 2, 6, 3, 7};
  __m256 t[8], s[4], w[2];
  for (int k = 0; k < 8; ++k) t[k] = _mm256_add_ps(lo[kOrder[k]], hi[kOrder[k]]);
  for (int k = 0; k < 4; ++k)  // s[k]: the low half t[2k]'s (l, l + 4) sums, the high t[2k+1]'s
    s[k] = _mm256_add_ps(_mm256_permute2f128_ps(t[2 * k], t[2 * k + 1], 0x20),
                         _mm256_permute2f128_ps(t[2 * k], t[2 * k + 1], 0x31));
  for (int k = 0; k < 2; ++k)  // w[k]: per half, the (l, l + 2) sums of two dots
    w[k] = _mm256_add_ps(_mm256_shuffle_ps(s[2 * k], s[2 * k + 1], 0x44),
                         _mm256_shuffle_ps(s[2 * k], s[2 * k + 1], 0xEE));
  return _mm256_add_ps(_mm256_shuffle_ps(w[0], w[1], 0x88), _mm256_shuffle_ps(w[0], w[1], 0xDD));
}

// Tiles of 2 vectors x 4 rows: lanes 0-7 of the 8 dots in one pass, lanes 8-15 in a second
// (8 accumulators each, 6 loads per 16 operations), then the 8 trees together (trees16x8) and
// each vector's four results stored at once. The four rows of a tile stay in L1 while every
// vector passes over them, and the next tile's rows are prefetched a few lines per vector pair
// (a long state's keys come from memory; prefetches change no result). Leftovers run
// dot_rows_avx2.
KEV_AVX2 void dot_block_avx2(const float* a, int64_t lda, int64_t na, const float* x, int64_t ldx,
                             int64_t nx, int64_t n, float* out, int64_t ldo) {
  const int64_t na2 = na / 2 * 2, nx4 = nx / 4 * 4;
  for (int64_t j = 0; j < nx4; j += 4) {
    const float* x0 = x + j * ldx;
    const int64_t ahead = std::min<int64_t>(4, nx4 - j - 4);
    RowPrefetch next(ahead > 0 ? x0 + 4 * ldx : x0, ldx, ahead, n, na2 / 2);
    for (int64_t i = 0; i < na2; i += 2) {
      next.step();
      const float* a0 = a + i * lda;
      __m256 lo[8], hi[8];
      lane_half_2x4(a0, a0 + lda, x0, x0 + ldx, x0 + 2 * ldx, x0 + 3 * ldx, n, 0, lo);
      lane_half_2x4(a0, a0 + lda, x0, x0 + ldx, x0 + 2 * ldx, x0 + 3 * ldx, n, 8, hi);
      const __m256 dots = trees16x8(lo, hi);
      _mm_storeu_ps(out + i * ldo + j, _mm256_castps256_ps128(dots));
      _mm_storeu_ps(out + (i + 1) * ldo + j, _mm256_extractf128_ps(dots, 1));
    }
  }
  for (int64_t i = 0; i < na; ++i) {
    const int64_t j0 = i < na2 ? nx4 : 0;  // the last odd vector takes every row
    if (j0 < nx) dot_rows_avx2(a + i * lda, x + j0 * ldx, ldx, nx - j0, n, out + i * ldo + j0);
  }
}

// Y outputs x 16 columns in 2Y accumulators: per row r one load of x_r's 16 columns serves the
// Y outputs (y_i = fma(p_i[r], x_r, y_i), r ascending: axpy_rows' order per element).
template <int Y>
KEV_AVX2 __attribute__((always_inline)) inline void axpy_tile(float* y, int64_t ldy, const float* p,
                                                              int64_t ldp, const float* x,
                                                              int64_t ldx, int64_t rows) {
  __m256 lo[Y], hi[Y];
  for (int i = 0; i < Y; ++i) {
    lo[i] = _mm256_loadu_ps(y + i * ldy);
    hi[i] = _mm256_loadu_ps(y + i * ldy + 8);
  }
  for (int64_t r = 0; r < rows; ++r) {
    const float* xr = x + r * ldx;
    const __m256 xl = _mm256_loadu_ps(xr), xh = _mm256_loadu_ps(xr + 8);
    for (int i = 0; i < Y; ++i) {
      const __m256 b = _mm256_broadcast_ss(p + i * ldp + r);
      lo[i] = _mm256_fmadd_ps(b, xl, lo[i]);
      hi[i] = _mm256_fmadd_ps(b, xh, hi[i]);
    }
  }
  for (int i = 0; i < Y; ++i) {
    _mm256_storeu_ps(y + i * ldy, lo[i]);
    _mm256_storeu_ps(y + i * ldy + 8, hi[i]);
  }
}

// Columns in slices of 16, rows in chunks of up to 256: a chunk's slice is first copied into a
// contiguous buffer (16 KiB at most, so it stays in L1 while every output passes over it; in
// place, rows a power-of-two stride apart would share a few cache sets and evict one another),
// then outputs run six at a time (12 accumulators), the last few four, two or one at a time,
// each continuing its sums chunk after chunk (rows still in order). Columns past the last 16
// run axpy_rows.
KEV_AVX2 void axpy_block_avx2(float* y, int64_t ldy, int64_t ny, const float* p, int64_t ldp,
                              const float* x, int64_t ldx, int64_t rows, int64_t n) {
  constexpr int64_t kChunk = 256;
  alignas(64) float slice[kChunk * 16];
  const int64_t n16 = n / 16 * 16;
  for (int64_t d = 0; d < n16; d += 16)
    for (int64_t r0 = 0; r0 < rows; r0 += kChunk) {
      const int64_t m = std::min(kChunk, rows - r0);
      for (int64_t r = 0; r < m; ++r) {
        const float* src = x + (r0 + r) * ldx + d;
        _mm256_store_ps(slice + r * 16, _mm256_loadu_ps(src));
        _mm256_store_ps(slice + r * 16 + 8, _mm256_loadu_ps(src + 8));
      }
      const float* pc = p + r0;
      // The next slice's rows (or the next chunk's first), a few per tile of six outputs.
      const bool last = d + 16 >= n16;
      const int64_t count = last ? std::min(kChunk, rows - r0 - m) : m;
      const float* ahead = !last ? x + r0 * ldx + d + 16 : count > 0 ? x + (r0 + m) * ldx : x;
      RowPrefetch next(ahead, ldx, count, 16, ny / 6);
      int64_t i = 0;
      for (; i + 6 <= ny; i += 6) {
        next.step();
        axpy_tile<6>(y + i * ldy + d, ldy, pc + i * ldp, ldp, slice, 16, m);
      }
      for (; i + 4 <= ny; i += 4)
        axpy_tile<4>(y + i * ldy + d, ldy, pc + i * ldp, ldp, slice, 16, m);
      for (; i + 2 <= ny; i += 2)
        axpy_tile<2>(y + i * ldy + d, ldy, pc + i * ldp, ldp, slice, 16, m);
      for (; i < ny; ++i) axpy_tile<1>(y + i * ldy + d, ldy, pc + i * ldp, ldp, slice, 16, m);
    }
  if (n16 < n)
    for (int64_t i = 0; i < ny; ++i)
      vec::axpy_rows(y + i * ldy + n16, p + i * ldp, x + n16, ldx, rows, n - n16);
}

#define KEV_AVX512 KEV_TARGET_AVX512

// gdn_block32_step's 64-column form: m, delta and o in 4 zmm each, the same operations per
// element in the same order.
KEV_AVX512 void gdn_block64_step(float* s, int64_t dk, float eg, const float* k, const float* q,
                                 const float* v, float beta, float* o) {
  constexpr int kVecs = 4;
  const __m512 egv = _mm512_set1_ps(eg), bv = _mm512_set1_ps(beta);
  __m512 acc[kVecs], delta[kVecs];
  for (int c = 0; c < kVecs; ++c) acc[c] = _mm512_setzero_ps();
  for (int64_t i = 0; i < dk; ++i) {  // S *= eg; m += k_i S
    float* row = s + i * 64;
    const __m512 ki = _mm512_set1_ps(k[i]);
    for (int c = 0; c < kVecs; ++c) {
      const __m512 r = _mm512_mul_ps(_mm512_loadu_ps(row + 16 * c), egv);
      _mm512_storeu_ps(row + 16 * c, r);
      acc[c] = _mm512_add_ps(acc[c], _mm512_mul_ps(ki, r));
    }
  }
  for (int c = 0; c < kVecs; ++c) {  // delta = beta (v - m); o = 0
    delta[c] = _mm512_mul_ps(bv, _mm512_sub_ps(_mm512_loadu_ps(v + 16 * c), acc[c]));
    acc[c] = _mm512_setzero_ps();
  }
  for (int64_t i = 0; i < dk; ++i) {  // S += k_i delta; o += q_i S
    float* row = s + i * 64;
    const __m512 ki = _mm512_set1_ps(k[i]), qi = _mm512_set1_ps(q[i]);
    for (int c = 0; c < kVecs; ++c) {
      const __m512 r = _mm512_add_ps(_mm512_loadu_ps(row + 16 * c), _mm512_mul_ps(ki, delta[c]));
      _mm512_storeu_ps(row + 16 * c, r);
      acc[c] = _mm512_add_ps(acc[c], _mm512_mul_ps(qi, r));
    }
  }
  for (int c = 0; c < kVecs; ++c) _mm512_storeu_ps(o + 16 * c, acc[c]);
}

// The L1 data cache's bytes (32 KiB where the system does not say).
int64_t l1d_bytes() {
  static const int64_t bytes = [] {
    const long b = sysconf(_SC_LEVEL1_DCACHE_SIZE);
    return b > 0 ? static_cast<int64_t>(b) : int64_t{32} << 10;
  }();
  return bytes;
}

// Blocks of 64 columns (twice the AVX2 form's work per instruction, and four independent sums
// per step as there) while a dk x 64 block fills at most three quarters of L1 (dk <= 144 on a
// 48 KiB L1: Zen 5, recent Xeons; dk <= 96 on Zen 4's 32 KiB, whose larger heads keep the
// 32-column blocks); then the AVX2 form's 32-column blocks and columns.
KEV_AVX512 void gdn_steps_avx512(float* s, int64_t dk, int64_t dv, int64_t len,
                                 const GdnTokens& t) {
  thread_local std::vector<float> block;
  int64_t j0 = 0;
  if (dk * 64 * int64_t{sizeof(float)} * 4 <= l1d_bytes() * 3)
    for (; j0 + 64 <= dv; j0 += 64)
      gdn_block_steps<64>(s, dk, dv, j0, len, t, block, [&](float* b, int64_t n) {
        gdn_block64_step(b, dk, t.eg[n], t.k + n * t.qkv_stride, t.q + n * t.qkv_stride,
                         t.v + n * t.qkv_stride + j0, t.beta[n], t.o + n * t.o_stride + j0);
      });
  gdn_blocks32_from(s, dk, dv, j0, len, t);
}

// Eight rows at a time against one vector (eight independent chains cover the add latency): per
// row dot's 16 lane sums in one register, then its tree. n must be a multiple of 16.
KEV_AVX512 void dot_rows_avx512(const float* a, const float* x, int64_t ld, int64_t rows, int64_t n,
                                float* out) {
  int64_t r = 0;
  for (; r + 8 <= rows; r += 8) {
    const float* xr = x + r * ld;
    __m512 acc[8];
    for (int c = 0; c < 8; ++c) acc[c] = _mm512_setzero_ps();
    for (int64_t i = 0; i < n; i += 16) {
      const __m512 av = _mm512_loadu_ps(a + i);
      for (int c = 0; c < 8; ++c)
        acc[c] = _mm512_fmadd_ps(av, _mm512_loadu_ps(xr + c * ld + i), acc[c]);
    }
    for (int c = 0; c < 8; ++c) out[r + c] = x86::tree16(acc[c]);
  }
  for (; r < rows; ++r) {
    const float* xr = x + r * ld;
    __m512 acc = _mm512_setzero_ps();
    for (int64_t i = 0; i < n; i += 16)
      acc = _mm512_fmadd_ps(_mm512_loadu_ps(a + i), _mm512_loadu_ps(xr + i), acc);
    out[r] = x86::tree16(acc);
  }
}

// The trees of 16 dots at once (each add the one tree16 does for its dot, on the same two
// operands: the shuffles only move lanes). acc[r + 4 c] holds dot (r, c)'s 16 lane sums; on
// return lanes 4r .. 4r + 3 hold dots (r, 0) .. (r, 3). Per step, the same lane pairs as tree16:
// (l, l + 8), (l, l + 4), (l, l + 2), (0, 1).
KEV_AVX512 inline __m512 trees16x16(const __m512* acc) {
  __m512 s[8], t[4], u[2];
  for (int k = 0; k < 8; ++k)  // s[k]: lanes 0-7 of acc[2k]'s first step, 8-15 acc[2k+1]'s
    s[k] = _mm512_add_ps(_mm512_shuffle_f32x4(acc[2 * k], acc[2 * k + 1], 0x44),
                         _mm512_shuffle_f32x4(acc[2 * k], acc[2 * k + 1], 0xEE));
  for (int k = 0; k < 4; ++k)  // t[k]: quarter q holds acc[4k + q]'s second step
    t[k] = _mm512_add_ps(_mm512_shuffle_f32x4(s[2 * k], s[2 * k + 1], 0x88),
                         _mm512_shuffle_f32x4(s[2 * k], s[2 * k + 1], 0xDD));
  for (int k = 0; k < 2; ++k)  // u[k]: quarter q holds acc[8k + q], then acc[8k + 4 + q]
    u[k] = _mm512_add_ps(_mm512_shuffle_ps(t[2 * k], t[2 * k + 1], 0x44),
                         _mm512_shuffle_ps(t[2 * k], t[2 * k + 1], 0xEE));
  return _mm512_add_ps(_mm512_shuffle_ps(u[0], u[1], 0x88),   // quarter q: acc[q], acc[4 + q],
                       _mm512_shuffle_ps(u[0], u[1], 0xDD));  // acc[8 + q], acc[12 + q]
}

// Tiles of 4 vectors x 4 rows: the 16 dots' lane sums in 16 registers (8 loads per 32
// operations), their trees together (trees16x16), each vector's four results stored at once.
// Leftovers run dot_rows_avx512.
KEV_AVX512 void dot_block_avx512(const float* a, int64_t lda, int64_t na, const float* x,
                                 int64_t ldx, int64_t nx, int64_t n, float* out, int64_t ldo) {
  const int64_t na4 = na / 4 * 4, nx4 = nx / 4 * 4;
  for (int64_t j = 0; j < nx4; j += 4) {
    const float* xj = x + j * ldx;
    const int64_t ahead = std::min<int64_t>(4, nx4 - j - 4);
    RowPrefetch next(ahead > 0 ? xj + 4 * ldx : xj, ldx, ahead, n, na4 / 4);
    for (int64_t i = 0; i < na4; i += 4) {
      next.step();
      const float* ai = a + i * lda;
      __m512 acc[16];
      for (int c = 0; c < 16; ++c) acc[c] = _mm512_setzero_ps();
      for (int64_t e = 0; e < n; e += 16) {
        __m512 av[4];
        for (int r = 0; r < 4; ++r) av[r] = _mm512_loadu_ps(ai + r * lda + e);
        for (int c = 0; c < 4; ++c) {
          const __m512 xv = _mm512_loadu_ps(xj + c * ldx + e);
          for (int r = 0; r < 4; ++r) acc[r + 4 * c] = _mm512_fmadd_ps(av[r], xv, acc[r + 4 * c]);
        }
      }
      const __m512 dots = trees16x16(acc);  // (the lane index must be a literal)
      _mm_storeu_ps(out + i * ldo + j, _mm512_extractf32x4_ps(dots, 0));
      _mm_storeu_ps(out + (i + 1) * ldo + j, _mm512_extractf32x4_ps(dots, 1));
      _mm_storeu_ps(out + (i + 2) * ldo + j, _mm512_extractf32x4_ps(dots, 2));
      _mm_storeu_ps(out + (i + 3) * ldo + j, _mm512_extractf32x4_ps(dots, 3));
    }
  }
  for (int64_t i = 0; i < na; ++i) {
    const int64_t j0 = i < na4 ? nx4 : 0;  // the last few vectors take every row
    if (j0 < nx) dot_rows_avx512(a + i * lda, x + j0 * ldx, ldx, nx - j0, n, out + i * ldo + j0);
  }
}

// Y outputs x 16 V columns in Y V accumulators: per row r, V loads of x_r serve the Y outputs
// (y_i = fma(p_i[r], x_r, y_i), r ascending: axpy_rows' order).
template <int Y, int V>
KEV_AVX512 __attribute__((always_inline)) inline void axpy_tile512(float* y, int64_t ldy,
                                                                   const float* p, int64_t ldp,
                                                                   const float* x, int64_t rows) {
  __m512 acc[Y][V];
  for (int i = 0; i < Y; ++i)
    for (int v = 0; v < V; ++v) acc[i][v] = _mm512_loadu_ps(y + i * ldy + 16 * v);
  for (int64_t r = 0; r < rows; ++r) {
    __m512 xv[V];
    for (int v = 0; v < V; ++v) xv[v] = _mm512_load_ps(x + r * 16 * V + 16 * v);
    for (int i = 0; i < Y; ++i) {
      const __m512 b = _mm512_set1_ps(p[i * ldp + r]);
      for (int v = 0; v < V; ++v) acc[i][v] = _mm512_fmadd_ps(b, xv[v], acc[i][v]);
    }
  }
  for (int i = 0; i < Y; ++i)
    for (int v = 0; v < V; ++v) _mm512_storeu_ps(y + i * ldy + 16 * v, acc[i][v]);
}

// One slice of 16 V columns from column d: rows in chunks of 128, each chunk's slice copied into
// a contiguous buffer (16 KiB at most: it stays in L1 while every output passes over it), then
// outputs 8, 4, 2 and 1 at a time, each continuing its sums chunk after chunk (rows in order).
template <int V>
KEV_AVX512 void axpy_slice512(float* y, int64_t ldy, int64_t ny, const float* p, int64_t ldp,
                              const float* x, int64_t ldx, int64_t rows, int64_t d) {
  constexpr int64_t kChunk = 256 / V;
  alignas(64) float slice[kChunk * 16 * V];
  for (int64_t r0 = 0; r0 < rows; r0 += kChunk) {
    const int64_t m = std::min(kChunk, rows - r0);
    for (int64_t r = 0; r < m; ++r)
      for (int v = 0; v < V; ++v)
        _mm512_store_ps(slice + (r * V + v) * 16, _mm512_loadu_ps(x + (r0 + r) * ldx + d + 16 * v));
    const float* pc = p + r0;
    int64_t i = 0;
    for (; i + 8 <= ny; i += 8)
      axpy_tile512<8, V>(y + i * ldy + d, ldy, pc + i * ldp, ldp, slice, m);
    for (; i + 4 <= ny; i += 4)
      axpy_tile512<4, V>(y + i * ldy + d, ldy, pc + i * ldp, ldp, slice, m);
    for (; i + 2 <= ny; i += 2)
      axpy_tile512<2, V>(y + i * ldy + d, ldy, pc + i * ldp, ldp, slice, m);
    for (; i < ny; ++i) axpy_tile512<1, V>(y + i * ldy + d, ldy, pc + i * ldp, ldp, slice, m);
  }
}

// Columns in slices of 32 (a last 16 in a slice of its own); columns past the last 16 run
// axpy_rows.
KEV_AVX512 void axpy_block_avx512(float* y, int64_t ldy, int64_t ny, const float* p, int64_t ldp,
                                  const float* x, int64_t ldx, int64_t rows, int64_t n) {
  int64_t d = 0;
  for (; d + 32 <= n; d += 32) axpy_slice512<2>(y, ldy, ny, p, ldp, x, ldx, rows, d);
  for (; d + 16 <= n; d += 16) axpy_slice512<1>(y, ldy, ny, p, ldp, x, ldx, rows, d);
  if (d < n)
    for (int64_t i = 0; i < ny; ++i)
      vec::axpy_rows(y + i * ldy + d, p + i * ldp, x + d, ldx, rows, n - d);
}

}  // namespace

const VecVariant* vec(Isa level) {
  static const VecVariant avx2 = {kAvx2, &dot_rows_avx2, &gdn_steps_avx2, &dot_block_avx2,
                                  &axpy_block_avx2};
  static const VecVariant avx512 = {kAvx512, &dot_rows_avx512, &gdn_steps_avx512, &dot_block_avx512,
                                    &axpy_block_avx512};
  if (level == kAvx512) return &avx512;
  return level == kAvx2 ? &avx2 : nullptr;
}

}  // namespace kev::arch
