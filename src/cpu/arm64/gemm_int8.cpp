// The aarch64 int8 GEMM variants (gemm_int8.h's order, bit for bit): a NEON kernel of 4
// activation rows x 16 outputs (one packed group), run by the neon level on every aarch64 CPU;
// and, for 8-bit activations only (`--precision w8a8`), a byte kernel of SDOT where the CPU has
// dotprod (not every ARMv8-A CPU does; "neon-dotprod", below).
//
// The NEON kernel's block sums are exact int32 (int16 activation x
// sign-extended int8 weight, widening multiply-accumulate SMLAL / SMLAL2 by element; integer sums
// do not depend on their order, and |isum| <= 32 * 32767 * 127 < 2^31 never overflows), then per
// block in ascending order float(isum) (SCVTF, round to nearest even), sx * sw (FMUL) and one
// fused multiply-add (FMLA, the portable std::fma). SDOT multiplies int8 by int8, so with 16-bit
// activations this kernel runs.
// Thread safety: reentrant (writes only its outputs).

#include <arm_neon.h>

#include <algorithm>
#include <cstring>

#include "cpu/arch.h"
#include "cpu/arm64/levels.h"
#include "cpu/bodies/int8_layout.h"
#include "cpu/drivers/precision_variants.h"

namespace kev::arch {
namespace {

constexpr int kRows = 4;  // activation rows per tile
using int8_layout::kGroup;
using int8_layout::kPairs;

// The weights of one pair of k for the group's 16 outputs, sign-extended to int16: e = even k,
// o = odd k; lo = outputs 0-7, hi = outputs 8-15 (the packed pair is [16 outputs][2], so LD2
// splits it into the even and the odd k).
struct PairWeights {
  int16x8_t e_lo, e_hi, o_lo, o_hi;
};

inline PairWeights load_pair(const int8_t* p) {
  const int8x16x2_t v = vld2q_s8(p);
  return {vmovl_s8(vget_low_s8(v.val[0])), vmovl_high_s8(v.val[0]), vmovl_s8(vget_low_s8(v.val[1])),
          vmovl_high_s8(v.val[1])};
}

// acc[c] (outputs 4c .. 4c+3) += the pair's weights times the activations x[2L] (even k) and
// x[2L+1] (odd k) of one row, products widened to int32 (exact).
template <int L>
inline void pair_step(int32x4_t (&acc)[4], int16x8_t x, const PairWeights& w) {
  acc[0] = vmlal_laneq_s16(acc[0], vget_low_s16(w.e_lo), x, 2 * L);
  acc[1] = vmlal_high_laneq_s16(acc[1], w.e_lo, x, 2 * L);
  acc[2] = vmlal_laneq_s16(acc[2], vget_low_s16(w.e_hi), x, 2 * L);
  acc[3] = vmlal_high_laneq_s16(acc[3], w.e_hi, x, 2 * L);
  acc[0] = vmlal_laneq_s16(acc[0], vget_low_s16(w.o_lo), x, 2 * L + 1);
  acc[1] = vmlal_high_laneq_s16(acc[1], w.o_lo, x, 2 * L + 1);
  acc[2] = vmlal_laneq_s16(acc[2], vget_low_s16(w.o_hi), x, 2 * L + 1);
  acc[3] = vmlal_high_laneq_s16(acc[3], w.o_hi, x, 2 * L + 1);
}

// Pairs 4t .. 4t+3 of a block for every row: one load of 8 activations (4 pairs) per row.
template <int L>
inline void pairs_step(int32x4_t (&acc)[kRows][4], const int16x8_t (&x)[kRows], const int8_t* wb) {
  const PairWeights w = load_pair(wb + L * kGroup * 2);
  for (int r = 0; r < kRows; ++r) pair_step<L>(acc[r], x[r], w);
}

// The tile's state, shared by both kernels: kRows rows x 16 outputs as [row][4 outputs].
template <typename V>
inline void fill(V (&tile)[kRows][4], V v) {
  for (auto& r : tile)
    for (auto& c : r) c = v;
}

// One block's exact sums into the tile's floats: per output f = fma(float(isum), sx * sw, f).
inline void fold_block(float32x4_t (&f)[kRows][4], const int32x4_t (&acc)[kRows][4],
                       const float* const (&sx)[kRows], int64_t b, const float* sw) {
  for (int c = 0; c < 4; ++c) {
    const float32x4_t s = vld1q_f32(sw + b * kGroup + 4 * c);
    for (int r = 0; r < kRows; ++r)
      f[r][c] = vfmaq_f32(f[r][c], vcvtq_f32_s32(acc[r][c]), vmulq_f32(vdupq_n_f32(sx[r][b]), s));
  }
}

inline void store_tile(const float32x4_t (&f)[kRows][4], float* out) {
  for (int r = 0; r < kRows; ++r)
    for (int c = 0; c < 4; ++c) vst1q_f32(out + r * kGroup + 4 * c, f[r][c]);
}

// kRows rows (x[r], scales sx[r]) x the 16 outputs of one group (weights w, scales sw, both
// [block][..]) into out [kRows][16]: per block the exact int32 sums, then per output
// f = fma(float(isum), sx * sw, f) in ascending block order.
void micro_neon(const int16_t* const (&x)[kRows], const float* const (&sx)[kRows], int64_t blocks,
                const int8_t* w, const float* sw, float* out) {
  float32x4_t f[kRows][4];
  fill(f, vdupq_n_f32(0.0f));
  for (int64_t b = 0; b < blocks; ++b) {
    int32x4_t acc[kRows][4];
    fill(acc, vdupq_n_s32(0));
    const int8_t* wb = w + b * kPairs * kGroup * 2;
    for (int64_t t = 0; t < kPairs / 4; ++t) {
      int16x8_t xv[kRows];
      for (int r = 0; r < kRows; ++r) xv[r] = vld1q_s16(x[r] + b * kQuantBlock + 8 * t);
      const int8_t* wt = wb + 4 * t * kGroup * 2;
      pairs_step<0>(acc, xv, wt);
      pairs_step<1>(acc, xv, wt);
      pairs_step<2>(acc, xv, wt);
      pairs_step<3>(acc, xv, wt);
    }
    fold_block(f, acc, sx, b, sw);
  }
  store_tile(f, out);
}

// Output groups [g0, g1) of y by tiles of kRows rows through micro(x rows, scale rows, blocks,
// the group's weights, its scales, out): the frame of both kernels below. A tile past the last
// row repeats row m (its outputs are dropped), so no padding is read.
template <typename T, typename Micro>
void run_tiles(const T* xq, int64_t kp, const float* sx, int64_t rows, const Int8Matrix& w,
               float* y, int64_t ldy, int64_t g0, int64_t g1, Micro micro) {
  const int64_t group_q = w.blocks * kPairs * kGroup * 2, group_s = w.blocks * kGroup;
  float out[kRows * kGroup];
  for (int64_t g = g0; g < g1; ++g) {
    const int64_t nr = std::min(kGroup, w.rows - g * kGroup);
    for (int64_t m = 0; m < rows; m += kRows) {
      const int64_t mr = std::min<int64_t>(kRows, rows - m);
      const T* xr[kRows];
      const float* sr[kRows];
      for (int64_t i = 0; i < kRows; ++i) {
        const int64_t r = i < mr ? m + i : m;
        xr[i] = xq + r * kp;
        sr[i] = sx + r * w.blocks;
      }
      micro(xr, sr, w.blocks, w.q.data() + g * group_q, w.scale.data() + g * group_s, out);
      for (int64_t i = 0; i < mr; ++i)
        std::memcpy(y + (m + i) * ldy + g * kGroup, out + i * kGroup,
                    static_cast<size_t>(nr) * sizeof(float));
    }
  }
}

void int8_range_neon(const int16_t* xq, int64_t kp, const float* sx, int64_t rows,
                     const Int8Matrix& w, float* y, int64_t ldy, int64_t g0, int64_t g1) {
  run_tiles(xq, kp, sx, rows, w, y, ldy, g0, g1, &micro_neon);
}

// ---- The byte kernel (8-bit activations, `--precision w8a8`): SDOT, four int8 products per
// int32 lane. The driver's bytes are u = q + 128, so u ^ 0x80 read as int8 is q itself: the block
// sums are the exact int32 sum of q * w, then the same float steps as micro_neon. A quad of k
// (pairs 2s and 2s + 1 of Int8Matrix's layout) becomes four 16-byte vectors of 4 outputs x 4 k
// by ZIP1/ZIP2 of 16-bit lanes; SDOT by element multiplies each with one row's 4 activations.
// (GCC 12 inlines the SDOT intrinsics only under an arch= target; a CPU with dotprod is ARMv8.2-A.)
#define KEV_DOTPROD __attribute__((target("arch=armv8.2-a+dotprod")))

// Quad L of a 16-k step for every row: the weights of pairs 2L and 2L + 1 of the step.
template <int L>
KEV_DOTPROD inline void quad_step(int32x4_t (&acc)[kRows][4], const int8x16_t (&x)[kRows],
                                  const int8_t* w) {
  const int16x8_t a0 = vreinterpretq_s16_s8(vld1q_s8(w + 2 * L * 2 * kGroup));
  const int16x8_t a1 = vreinterpretq_s16_s8(vld1q_s8(w + 2 * L * 2 * kGroup + 16));
  const int16x8_t b0 = vreinterpretq_s16_s8(vld1q_s8(w + (2 * L + 1) * 2 * kGroup));
  const int16x8_t b1 = vreinterpretq_s16_s8(vld1q_s8(w + (2 * L + 1) * 2 * kGroup + 16));
  const int8x16_t q[4] = {
      vreinterpretq_s8_s16(vzip1q_s16(a0, b0)), vreinterpretq_s8_s16(vzip2q_s16(a0, b0)),
      vreinterpretq_s8_s16(vzip1q_s16(a1, b1)), vreinterpretq_s8_s16(vzip2q_s16(a1, b1))};
  for (int r = 0; r < kRows; ++r)
    for (int c = 0; c < 4; ++c) acc[r][c] = vdotq_laneq_s32(acc[r][c], q[c], x[r], L);
}

KEV_DOTPROD void micro_dotprod(const uint8_t* const (&x)[kRows], const float* const (&sx)[kRows],
                               int64_t blocks, const int8_t* w, const float* sw, float* out) {
  float32x4_t f[kRows][4];
  fill(f, vdupq_n_f32(0.0f));
  const uint8x16_t bias = vdupq_n_u8(0x80);
  for (int64_t b = 0; b < blocks; ++b) {
    int32x4_t acc[kRows][4];
    fill(acc, vdupq_n_s32(0));
    const int8_t* wb = w + b * kPairs * kGroup * 2;
    for (int64_t t = 0; t < kQuantBlock / 16; ++t) {
      int8x16_t xv[kRows];
      for (int r = 0; r < kRows; ++r)
        xv[r] = vreinterpretq_s8_u8(veorq_u8(vld1q_u8(x[r] + b * kQuantBlock + 16 * t), bias));
      const int8_t* wt = wb + 8 * t * kGroup * 2;  // pairs 8t .. 8t + 7
      quad_step<0>(acc, xv, wt);
      quad_step<1>(acc, xv, wt);
      quad_step<2>(acc, xv, wt);
      quad_step<3>(acc, xv, wt);
    }
    fold_block(f, acc, sx, b, sw);
  }
  store_tile(f, out);
}

void int8_byte_range_dotprod(const uint8_t* xu, int64_t kp, const float* sx, int64_t rows,
                             const Int8Matrix& w, float* y, int64_t ldy, int64_t g0, int64_t g1) {
  run_tiles(xu, kp, sx, rows, w, y, ldy, g0, g1, &micro_dotprod);
}

// Positions in int8_variants().
enum Int8Index { kNeonIndex, kDotprodIndex };

}  // namespace

int int8_choice(Isa level) {
  return level == kNeon ? int{kNeonIndex} : -1;
}

// SDOT where the CPU has dotprod (not every ARMv8-A CPU does), once it passed its probe; else
// the NEON int16 kernel, which computes 8-bit activations exactly too.
int int8_byte_choice(Isa level) {
  if (level != kNeon || !cpu_has_dotprod()) return -1;
  static const bool passed = probe_kernel(family_int8_kernel(kDotprodIndex));
  return passed ? int{kDotprodIndex} : -1;
}

std::span<const Int8Variant> int8_variants() {
  static const Int8Variant kVariants[] = {
      {"neon", kNeon, nullptr, &int8_range_neon},
      {"neon-dotprod", kNeon, &cpu_has_dotprod, nullptr, &int8_byte_range_dotprod}};
  static_assert(kNeonIndex == 0 && kDotprodIndex == 1);
  return kVariants;
}

QuantizeBlock quantize_block() {
  return nullptr;  // the portable quantizer (no NEON form yet)
}

}  // namespace kev::arch
