// The x86-64 BF16 x FP32 GEMM variants (gemm.h's order, bit-identical to the portable one):
// AVX2+FMA and AVX-512 direct tile kernels for decode-sized batches, and the lane-major packed
// path both levels take for prefill-sized batches (arch::GemmVariant::whole).
#include <algorithm>
#include <cstring>
#include <vector>

#include "cpu/bodies/gemm_tile.h"
#include "cpu/bodies/kernel_order.h"
#include "cpu/drivers/group_chunks.h"
#include "cpu/x86/levels.h"
#include "cpu/x86/target.h"
#include "kev/core/threads.h"

namespace kev::arch {
namespace {

using gemm_tile::kLanes;
// ---- AVX2: a 16-lane accumulator is two ymm registers (lanes 0-7, 8-15) ----
#define KEV_AVX2 KEV_TARGET_AVX2

KEV_AVX2 inline __m256 widen8(const uint16_t* p) {
  __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p));
  return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
}

template <int MR, int NR>
KEV_AVX2 inline void avx2_step(__m256 (&lo)[MR][NR], __m256 (&hi)[MR][NR], const float* const* xp,
                               const uint16_t* const* wp) {
  __m256 wl[NR], wh[NR];
  for (int j = 0; j < NR; ++j) {
    wl[j] = widen8(wp[j]);
    wh[j] = widen8(wp[j] + 8);
  }
  for (int i = 0; i < MR; ++i) {
    __m256 xl = _mm256_loadu_ps(xp[i]), xh = _mm256_loadu_ps(xp[i] + 8);
    for (int j = 0; j < NR; ++j) {
      lo[i][j] = _mm256_fmadd_ps(xl, wl[j], lo[i][j]);
      hi[i][j] = _mm256_fmadd_ps(xh, wh[j], hi[i][j]);
    }
  }
}

template <int MR, int NR>
KEV_AVX2 void kernel_avx2(const float* x, int64_t ldx, const uint16_t* w, int64_t ldw,
                          int64_t k_total, float* y, int64_t ldy) {
  __m256 lo[MR][NR], hi[MR][NR];
  for (int i = 0; i < MR; ++i)
    for (int j = 0; j < NR; ++j) lo[i][j] = hi[i][j] = _mm256_setzero_ps();
  gemm_tile::k_steps<MR, NR>(x, ldx, w, ldw, k_total,
                             [&](const float* const* xp, const uint16_t* const* wp)
                                 KEV_AVX2 { avx2_step<MR, NR>(lo, hi, xp, wp); });
  alignas(32) float lanes[kLanes];
  for (int i = 0; i < MR; ++i)
    for (int j = 0; j < NR; ++j) {
      _mm256_store_ps(lanes, lo[i][j]);
      _mm256_store_ps(lanes + 8, hi[i][j]);
      y[i * ldy + j] = tree16(lanes);
    }
}

// ---- AVX2, lane-major packed: prefill-sized batches ----
// Lane l of an output is the dot product over k = l, l+16, ... of length d_l = ceil((K - l) /
// 16), accumulated in ascending k with one FMA per step. So the batch product is 16 ordinary
// GEMMs of depth d_l whose results are kept apart and then added in the fixed tree. Done that
// way, a GEMM can use the broadcast form (one activation broadcast times 8 outputs' weights)
// and a 6-row x 16-output register tile: per step 2 weight loads + 6 broadcasts feed 12 FMAs,
// against 10 loads per 12 FMAs for the dot form. Activations are packed once per call, lane by
// lane, 6 rows interleaved ([tile][lane][step][6]); weights per 16 outputs ([lane][step][16],
// BF16 widened to FP32 once and reused by every row tile of the batch). Rows and outputs past
// the edge are zero-padded in the packs and never written back. Every lane still sees exactly
// its own products in ascending k, and the tree is the same: results are bit-identical to the
// other paths.
constexpr int kLmMr = 6, kLmNr = 16;

inline int64_t lane_depth(int64_t k_total, int l) {
  return k_total > l ? (k_total - l + kLanes - 1) / kLanes : 0;
}

// Where lane l's steps start in a pack of `width` floats per step (the lanes one after another):
// off[l] = width x the steps of lanes 0 .. l - 1; off[16] = the whole pack.
inline void lane_offsets(int64_t k_total, int64_t width, int64_t (&off)[kLanes + 1]) {
  off[0] = 0;
  for (int l = 0; l < kLanes; ++l) off[l + 1] = off[l] + lane_depth(k_total, l) * width;
}

// One row of the 6 x 16 tile for one step: c0/c1 (outputs 0-7, 8-15) += a[0] x b0/b1.
KEV_AVX2 __attribute__((always_inline)) inline void lm_row(const float* a, __m256 b0, __m256 b1,
                                                           __m256& c0, __m256& c1) {
  const __m256 av = _mm256_broadcast_ss(a);
  c0 = _mm256_fmadd_ps(av, b0, c0);
  c1 = _mm256_fmadd_ps(av, b1, c1);
}

// c[r * 16 + j] = lane sum of row r, output j over `depth` steps of a (6 floats / step) and
// b (16 floats / step).
KEV_AVX2 void lm_micro(const float* a, const float* b, int64_t depth, float* c) {
  // Twelve named accumulators: GCC 12 keeps an accumulator array in memory here (a store per
  // FMA), which halves the speed.
  __m256 c00 = _mm256_setzero_ps(), c01 = c00, c10 = c00, c11 = c00, c20 = c00, c21 = c00;
  __m256 c30 = c00, c31 = c00, c40 = c00, c41 = c00, c50 = c00, c51 = c00;
  for (int64_t s = 0; s < depth; ++s, a += kLmMr, b += kLmNr) {
    const __m256 b0 = _mm256_loadu_ps(b), b1 = _mm256_loadu_ps(b + 8);
    lm_row(a, b0, b1, c00, c01);
    lm_row(a + 1, b0, b1, c10, c11);
    lm_row(a + 2, b0, b1, c20, c21);
    lm_row(a + 3, b0, b1, c30, c31);
    lm_row(a + 4, b0, b1, c40, c41);
    lm_row(a + 5, b0, b1, c50, c51);
  }
  const __m256 out[kLmMr][2] = {{c00, c01}, {c10, c11}, {c20, c21},
                                {c30, c31}, {c40, c41}, {c50, c51}};
  for (int r = 0; r < kLmMr; ++r) {
    _mm256_storeu_ps(c + r * kLmNr, out[r][0]);
    _mm256_storeu_ps(c + r * kLmNr + 8, out[r][1]);
  }
}

// The fixed tree over 16 lane blocks of 96 sums (lanes[l * 96 + i]), 8 outputs at a time;
// writes rows < mr, outputs < nr of the tile.
KEV_AVX2 void lm_reduce(const float* lanes, int mr, int nr, float* y, int64_t ldy) {
  constexpr int kTile = kLmMr * kLmNr;
  alignas(32) float out[kTile];
  for (int i = 0; i < kTile; i += 8) {
    __m256 t[8], u[4], v[2];
    for (int l = 0; l < 8; ++l)
      t[l] = _mm256_add_ps(_mm256_loadu_ps(lanes + l * kTile + i),
                           _mm256_loadu_ps(lanes + (l + 8) * kTile + i));
    for (int l = 0; l < 4; ++l) u[l] = _mm256_add_ps(t[l], t[l + 4]);
    for (int l = 0; l < 2; ++l) v[l] = _mm256_add_ps(u[l], u[l + 2]);
    _mm256_store_ps(out + i, _mm256_add_ps(v[0], v[1]));
  }
  for (int r = 0; r < mr; ++r) {
    if (nr == kLmNr) {
      _mm256_storeu_ps(y + r * ldy, _mm256_load_ps(out + r * kLmNr));
      _mm256_storeu_ps(y + r * ldy + 8, _mm256_load_ps(out + r * kLmNr + 8));
    } else {
      for (int j = 0; j < nr; ++j) y[r * ldy + j] = out[r * kLmNr + j];
    }
  }
}

// In-register 8x8 transpose: afterwards r[i][j] is the old r[j][i].
KEV_AVX2 inline void transpose8(__m256 (&r)[8]) {
  __m256 t[8], u[8];
  for (int i = 0; i < 8; i += 2) {
    t[i] = _mm256_unpacklo_ps(r[i], r[i + 1]);
    t[i + 1] = _mm256_unpackhi_ps(r[i], r[i + 1]);
  }
  for (int i = 0; i < 8; i += 4) {
    u[i] = _mm256_shuffle_ps(t[i], t[i + 2], 0x44);
    u[i + 1] = _mm256_shuffle_ps(t[i], t[i + 2], 0xEE);
    u[i + 2] = _mm256_shuffle_ps(t[i + 1], t[i + 3], 0x44);
    u[i + 3] = _mm256_shuffle_ps(t[i + 1], t[i + 3], 0xEE);
  }
  for (int i = 0; i < 4; ++i) {
    r[i] = _mm256_permute2f128_ps(u[i], u[i + 4], 0x20);
    r[i + 4] = _mm256_permute2f128_ps(u[i], u[i + 4], 0x31);
  }
}

// Activation rows [m0, m0 + 6) -> [lane][step][6] (rows past `rows` are zeros). Whole 16-wide
// K steps go through 8x8 register transposes (each row read once, not once per lane); the last
// partial step is scalar.
KEV_AVX2 void lm_pack_rows(const float* x, int64_t rows, int64_t ldx, int64_t k_total, int64_t m0,
                           float* out) {
  int64_t off[kLanes + 1];
  lane_offsets(k_total, kLmMr, off);
  const int live = static_cast<int>(std::min<int64_t>(kLmMr, rows - m0));
  const int64_t full = k_total / kLanes;
  for (int64_t s = 0; s < full; ++s)
    for (int l0 = 0; l0 < kLanes; l0 += 8) {
      __m256 r[8];
      for (int i = 0; i < 8; ++i)
        r[i] =
            i < live ? _mm256_loadu_ps(x + (m0 + i) * ldx + s * kLanes + l0) : _mm256_setzero_ps();
      transpose8(r);  // r[i]: lane l0 + i of rows 0..7; rows 6 and 7 are not stored
      for (int i = 0; i < 8; ++i) {
        float* to = out + off[l0 + i] + s * kLmMr;
        _mm_storeu_ps(to, _mm256_castps256_ps128(r[i]));
        _mm_storel_pi(reinterpret_cast<__m64*>(to + 4), _mm256_extractf128_ps(r[i], 1));
      }
    }
  for (int l = 0; l < k_total - full * kLanes; ++l)
    for (int r = 0; r < kLmMr; ++r)
      out[off[l] + full * kLmMr + r] = r < live ? x[(m0 + r) * ldx + full * kLanes + l] : 0.0f;
}

// Weight rows [n, n + nr) (nr <= 16) -> [lane][step][16] FP32 (outputs past nr are zeros).
// Whole 16-wide K steps go through 8x8 register transposes; the last partial step is scalar.
KEV_AVX2 void lm_pack_weights(const uint16_t* w, int64_t k_total, int nr, float* out) {
  int64_t off[kLanes + 1];
  lane_offsets(k_total, kLmNr, off);
  const int64_t full = k_total / kLanes;
  for (int64_t s = 0; s < full; ++s)
    for (int j0 = 0; j0 < kLmNr; j0 += 8)
      for (int l0 = 0; l0 < kLanes; l0 += 8) {
        __m256 r[8];
        for (int j = 0; j < 8; ++j)
          r[j] =
              j0 + j < nr ? widen8(w + (j0 + j) * k_total + s * kLanes + l0) : _mm256_setzero_ps();
        transpose8(r);
        for (int i = 0; i < 8; ++i) _mm256_storeu_ps(out + off[l0 + i] + s * kLmNr + j0, r[i]);
      }
  for (int l = 0; l < k_total - full * kLanes; ++l)
    for (int j = 0; j < kLmNr; ++j) {
      uint32_t u = 0;
      if (j < nr) {
        uint16_t h;
        std::memcpy(&h, w + j * k_total + full * kLanes + l, 2);
        u = static_cast<uint32_t>(h) << 16;
      }
      std::memcpy(out + off[l] + full * kLmNr + j, &u, 4);
    }
}

// ---- AVX-512 ----
#define KEV_AVX512 KEV_TARGET_AVX512

// The zero-masked forms avoid GCC 12's false "maybe uninitialized" on the unmasked intrinsics.
KEV_AVX512 inline __m512 widen16(__m256i h) {
  const __mmask16 all = 0xFFFF;
  return _mm512_castsi512_ps(_mm512_maskz_slli_epi32(all, _mm512_maskz_cvtepu16_epi32(all, h), 16));
}

template <int MR, int NR>
KEV_AVX512 void kernel_avx512(const float* x, int64_t ldx, const uint16_t* w, int64_t ldw,
                              int64_t k_total, float* y, int64_t ldy) {
  __m512 acc[MR][NR];
  for (int i = 0; i < MR; ++i)
    for (int j = 0; j < NR; ++j) acc[i][j] = _mm512_setzero_ps();
  int64_t k = 0;
  for (; k + kLanes <= k_total; k += kLanes) {
    __m512 wv[NR];
    for (int j = 0; j < NR; ++j) {
      __m256i h = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(w + j * ldw + k));
      wv[j] = widen16(h);
    }
    for (int i = 0; i < MR; ++i) {
      __m512 xv = _mm512_loadu_ps(x + i * ldx + k);
      for (int j = 0; j < NR; ++j) acc[i][j] = _mm512_fmadd_ps(xv, wv[j], acc[i][j]);
    }
  }
  if (k < k_total) {
    __mmask16 m = static_cast<__mmask16>((1u << (k_total - k)) - 1u);
    __m512 wv[NR];
    for (int j = 0; j < NR; ++j) {
      __m256i h = _mm256_maskz_loadu_epi16(m, w + j * ldw + k);
      wv[j] = widen16(h);
    }
    for (int i = 0; i < MR; ++i) {
      __m512 xv = _mm512_maskz_loadu_ps(m, x + i * ldx + k);
      for (int j = 0; j < NR; ++j) acc[i][j] = _mm512_fmadd_ps(xv, wv[j], acc[i][j]);
    }
  }
  alignas(64) float lanes[kLanes];
  for (int i = 0; i < MR; ++i)
    for (int j = 0; j < NR; ++j) {
      _mm512_store_ps(lanes, acc[i][j]);
      y[i * ldy + j] = tree16(lanes);
    }
}

// ---- AVX-512, lane-major packed: the AVX2 path's packs, two 16-output groups per call ----
// One zmm holds a step's 16 weights of a group, so 6 rows x 2 groups give 12 independent
// accumulators (enough to keep two 512-bit FMA pipes busy) from 2 weight loads and 6 broadcasts
// per step. Each accumulator element is one lane sum of one row and output, FMA'd in ascending
// step exactly as lm_micro does: the same bits.
#define KEV_LM_ROW2(r)                        \
  av = _mm512_set1_ps(a[r]);                  \
  c##r##0 = _mm512_fmadd_ps(av, w0, c##r##0); \
  c##r##1 = _mm512_fmadd_ps(av, w1, c##r##1);
KEV_AVX512 void lm_micro_avx512_x2(const float* a, const float* b0, const float* b1, int64_t depth,
                                   float* c0, float* c1) {
  __m512 c00 = _mm512_setzero_ps(), c01 = c00, c10 = c00, c11 = c00, c20 = c00, c21 = c00;
  __m512 c30 = c00, c31 = c00, c40 = c00, c41 = c00, c50 = c00, c51 = c00;
  for (int64_t s = 0; s < depth; ++s, a += kLmMr, b0 += kLmNr, b1 += kLmNr) {
    const __m512 w0 = _mm512_loadu_ps(b0), w1 = _mm512_loadu_ps(b1);
    __m512 av;
    KEV_LM_ROW2(0)
    KEV_LM_ROW2(1)
    KEV_LM_ROW2(2)
    KEV_LM_ROW2(3)
    KEV_LM_ROW2(4)
    KEV_LM_ROW2(5)
  }
  const __m512 out[kLmMr][2] = {{c00, c01}, {c10, c11}, {c20, c21},
                                {c30, c31}, {c40, c41}, {c50, c51}};
  for (int r = 0; r < kLmMr; ++r) {
    _mm512_storeu_ps(c0 + r * kLmNr, out[r][0]);
    _mm512_storeu_ps(c1 + r * kLmNr, out[r][1]);
  }
}
#undef KEV_LM_ROW2

// Four groups per call: 24 accumulators, 4 weight loads and 6 broadcasts per step.
#define KEV_LM_ROW(r)                         \
  av = _mm512_set1_ps(a[r]);                  \
  c##r##0 = _mm512_fmadd_ps(av, w0, c##r##0); \
  c##r##1 = _mm512_fmadd_ps(av, w1, c##r##1); \
  c##r##2 = _mm512_fmadd_ps(av, w2, c##r##2); \
  c##r##3 = _mm512_fmadd_ps(av, w3, c##r##3);
KEV_AVX512 void lm_micro_avx512_x4(const float* a, const float* const* b, int64_t depth,
                                   float* const* c) {
  __m512 c00 = _mm512_setzero_ps(), c01 = c00, c02 = c00, c03 = c00, c10 = c00, c11 = c00,
         c12 = c00, c13 = c00, c20 = c00, c21 = c00, c22 = c00, c23 = c00, c30 = c00, c31 = c00,
         c32 = c00, c33 = c00, c40 = c00, c41 = c00, c42 = c00, c43 = c00, c50 = c00, c51 = c00,
         c52 = c00, c53 = c00;
  const float *b0 = b[0], *b1 = b[1], *b2 = b[2], *b3 = b[3];
  for (int64_t s = 0; s < depth; ++s, a += kLmMr) {
    const int64_t o = s * kLmNr;
    const __m512 w0 = _mm512_loadu_ps(b0 + o), w1 = _mm512_loadu_ps(b1 + o),
                 w2 = _mm512_loadu_ps(b2 + o), w3 = _mm512_loadu_ps(b3 + o);
    __m512 av;
    KEV_LM_ROW(0)
    KEV_LM_ROW(1)
    KEV_LM_ROW(2)
    KEV_LM_ROW(3)
    KEV_LM_ROW(4)
    KEV_LM_ROW(5)
  }
  const __m512 out[kLmMr][4] = {{c00, c01, c02, c03}, {c10, c11, c12, c13}, {c20, c21, c22, c23},
                                {c30, c31, c32, c33}, {c40, c41, c42, c43}, {c50, c51, c52, c53}};
  for (int g = 0; g < 4; ++g)
    for (int r = 0; r < kLmMr; ++r) _mm512_storeu_ps(c[g] + r * kLmNr, out[r][g]);
}
#undef KEV_LM_ROW

// Batches of at least this many rows and outputs take the lane-major path; below that
// packing would not pay for itself and the direct kernel runs.
constexpr int64_t kPackMinRows = 6, kPackMinCols = 64;

// One thread's outputs [n0, n1) from the packed activations (tiles of 6 rows x K floats).
// `wide`: the AVX-512 micro-kernel takes the groups two at a time (same bits).
void run_range_lane_major(const float* xp, int64_t rows, const Bf16Matrix& w, float* y, int64_t ldy,
                          int64_t n0, int64_t n1, bool wide) {
  const int64_t k_total = w.cols;
  int64_t off[kLanes + 1];  // in steps
  lane_offsets(k_total, 1, off);
  // Outputs go in groups of up to kGroup x 16 (weights packed per 16, [lane][step][16] each).
  // A block of row tiles walks the lanes; within a lane, each tile's activations for that lane
  // (6 x d_l floats, L1) meet the lane's weights of every 16 outputs of the group (L2), so the
  // packed activations stream from memory once per group rather than once per 16 outputs. The
  // block's lane sums wait in `lanes` (6 KiB per tile and 16 outputs) until the tree.
  constexpr int64_t kGroup = 4, kTilesPerBlock = 4, kTileSums = kLmMr * kLmNr;
  thread_local std::vector<float> wp, lanes;
  if (wp.size() < static_cast<size_t>(kGroup * kLmNr * k_total))
    wp.resize(static_cast<size_t>(kGroup * kLmNr * k_total));
  lanes.resize(static_cast<size_t>(kTilesPerBlock * kGroup * kLanes * kTileSums));
  const int64_t tiles = (rows + kLmMr - 1) / kLmMr;
  for (int64_t g0 = n0; g0 < n1; g0 += kGroup * kLmNr) {
    const int64_t groups = std::min<int64_t>(kGroup, (n1 - g0 + kLmNr - 1) / kLmNr);
    for (int64_t b = 0; b < groups; ++b) {
      const int nr = static_cast<int>(std::min<int64_t>(kLmNr, n1 - g0 - b * kLmNr));
      lm_pack_weights(w.data + (g0 + b * kLmNr) * k_total, k_total, nr,
                      wp.data() + b * kLmNr * k_total);
    }
    for (int64_t t0 = 0; t0 < tiles; t0 += kTilesPerBlock) {
      const int64_t t1 = std::min(tiles, t0 + kTilesPerBlock);
      for (int l = 0; l < kLanes; ++l) {
        const int64_t depth = off[l + 1] - off[l];
        auto act = [&](int64_t t) { return xp + t * kLmMr * k_total + off[l] * kLmMr; };
        auto wl = [&](int64_t b) { return wp.data() + b * kLmNr * k_total + off[l] * kLmNr; };
        auto sums = [&](int64_t t, int64_t b) {
          return lanes.data() + (((t - t0) * kGroup + b) * kLanes + l) * kTileSums;
        };
        if (!wide) {
          // Group by group, so that one group's lane weights (d_l x 64 bytes) stay in L1 while
          // the block's tiles pass over them (all four groups' would not at K = 3584).
          for (int64_t b = 0; b < groups; ++b)
            for (int64_t t = t0; t < t1; ++t) lm_micro(act(t), wl(b), depth, sums(t, b));
          continue;
        }
        for (int64_t t = t0; t < t1; ++t) {
          int64_t b = 0;
          if (groups == 4) {
            const float* bs[4] = {wl(0), wl(1), wl(2), wl(3)};
            float* cs[4] = {sums(t, 0), sums(t, 1), sums(t, 2), sums(t, 3)};
            lm_micro_avx512_x4(act(t), bs, depth, cs);
            b = 4;
          }
          for (; b + 2 <= groups; b += 2)
            lm_micro_avx512_x2(act(t), wl(b), wl(b + 1), depth, sums(t, b), sums(t, b + 1));
          for (; b < groups; ++b) lm_micro(act(t), wl(b), depth, sums(t, b));
        }
      }
      for (int64_t t = t0; t < t1; ++t) {
        const int mr = static_cast<int>(std::min<int64_t>(kLmMr, rows - t * kLmMr));
        for (int64_t b = 0; b < groups; ++b) {
          const int nr = static_cast<int>(std::min<int64_t>(kLmNr, n1 - g0 - b * kLmNr));
          lm_reduce(lanes.data() + ((t - t0) * kGroup + b) * kLanes * kTileSums, mr, nr,
                    y + t * kLmMr * ldy + g0 + b * kLmNr, ldy);
        }
      }
    }
  }
}

// The lane-major product over all threads: activations packed up to kLmPackBytes at a time
// (shared by all threads: 32 MiB, a whole 2,048-token prefill step at 0.8B dimensions, 906 rows
// at K = 9216), outputs split in panels of 16 as group_chunks splits them (runs of 4 panels: one
// output group of run_range_lane_major); each worker packs its outputs' weights once per chunk.
// Declines batches too small to pay for the packing.
bool lane_major(const float* x, int64_t rows, int64_t ldx, const Bf16Matrix& w, float* y,
                int64_t ldy, size_t threads, bool wide) {
  if (rows < kPackMinRows || w.rows < kPackMinCols) return false;
  constexpr int64_t kLmPackBytes = int64_t{32} << 20;
  const int64_t k_total = w.cols;
  const int64_t chunk_rows =
      std::max<int64_t>(1, kLmPackBytes / (k_total * int64_t{sizeof(float)}) / kLmMr) * kLmMr;
  thread_local std::vector<float> xp;
  const int64_t panels = (w.rows + kLmNr - 1) / kLmNr;  // of 16 outputs
  for (int64_t r0 = 0; r0 < rows; r0 += chunk_rows) {
    const int64_t rn = std::min(chunk_rows, rows - r0), tiles = (rn + kLmMr - 1) / kLmMr;
    if (xp.size() < static_cast<size_t>(tiles * kLmMr * k_total))
      xp.resize(static_cast<size_t>(tiles * kLmMr * k_total));
    float* xpd = xp.data();
    const float* xc = x + r0 * ldx;
    float* yc = y + r0 * ldy;
    parallel_for(
        static_cast<size_t>(tiles),
        [&](size_t t) {
          const int64_t m0 = static_cast<int64_t>(t) * kLmMr;
          lm_pack_rows(xc, rn, ldx, k_total, m0, xpd + m0 * k_total);
        },
        threads);
    group_chunks::run(panels, threads, 1, [&](int64_t p0, int64_t p1) {
      run_range_lane_major(xpd, rn, w, yc, ldy, p0 * kLmNr, std::min(w.rows, p1 * kLmNr), wide);
    });
  }
  return true;
}

bool lane_major_avx2(const float* x, int64_t rows, int64_t ldx, const Bf16Matrix& w, float* y,
                     int64_t ldy, size_t threads) {
  return lane_major(x, rows, ldx, w, y, ldy, threads, false);
}

bool lane_major_avx512(const float* x, int64_t rows, int64_t ldx, const Bf16Matrix& w, float* y,
                       int64_t ldy, size_t threads) {
  return lane_major(x, rows, ldx, w, y, ldy, threads, true);
}

template <int MR, int NR>
struct Avx2K {
  static constexpr arch::GemmTile fn = &kernel_avx2<MR, NR>;
};
template <int MR, int NR>
struct Avx512K {
  static constexpr arch::GemmTile fn = &kernel_avx512<MR, NR>;
};

}  // namespace

// AVX2: 2x2 tiles (8 accumulator pairs plus operands fit 16 ymm registers); AVX-512: 4x4.
const GemmVariant* gemm(Isa level) {
  static const arch::GemmVariant avx2 = {&gemm_tile::tile_for<Avx2K>, 2, 2, &lane_major_avx2};
  static const arch::GemmVariant avx512 = {&gemm_tile::tile_for<Avx512K>, 4, 4, &lane_major_avx512};
  if (level == kAvx512) return &avx512;
  if (level == kAvx2) return &avx2;
  return nullptr;
}

}  // namespace kev::arch
