// The aarch64 BF16 x FP32 GEMM variant (gemm.h's order, bit-identical to the portable one):
// NEON direct tile kernels (FMLA per lane step), 2 x 2 tiles.
#include <arm_neon.h>

#include "cpu/arm64/levels.h"
#include "cpu/bodies/gemm_tile.h"
#include "cpu/bodies/kernel_order.h"

namespace kev::arch {
namespace {

using gemm_tile::kLanes;

// ---- NEON: a 16-lane accumulator is four quad registers (lanes 4q .. 4q+3) ----
inline float32x4_t widen4(const uint16_t* p) {
  return vreinterpretq_f32_u32(vshll_n_u16(vld1_u16(p), 16));
}

// One 16-wide k step of an MR x NR tile: lane l of output (i, j) takes x[i][k+l] * w[j][k+l]
// with one fused multiply-add (FMLA), as kernel_scalar does.
template <int MR, int NR>
inline void neon_step(float32x4_t (&acc)[MR][NR][4], const float* const* xp,
                      const uint16_t* const* wp) {
  float32x4_t wv[NR][4];
  for (int j = 0; j < NR; ++j)
    for (int q = 0; q < 4; ++q) wv[j][q] = widen4(wp[j] + 4 * q);
  for (int i = 0; i < MR; ++i)
    for (int q = 0; q < 4; ++q) {
      const float32x4_t xv = vld1q_f32(xp[i] + 4 * q);
      for (int j = 0; j < NR; ++j) acc[i][j][q] = vfmaq_f32(acc[i][j][q], xv, wv[j][q]);
    }
}

template <int MR, int NR>
void kernel_neon(const float* x, int64_t ldx, const uint16_t* w, int64_t ldw, int64_t k_total,
                 float* y, int64_t ldy) {
  float32x4_t acc[MR][NR][4];
  for (int i = 0; i < MR; ++i)
    for (int j = 0; j < NR; ++j)
      for (int q = 0; q < 4; ++q) acc[i][j][q] = vdupq_n_f32(0.0f);
  gemm_tile::k_steps<MR, NR>(
      x, ldx, w, ldw, k_total,
      [&](const float* const* xp, const uint16_t* const* wp) { neon_step<MR, NR>(acc, xp, wp); });
  float lanes[kLanes];
  for (int i = 0; i < MR; ++i)
    for (int j = 0; j < NR; ++j) {
      for (int q = 0; q < 4; ++q) vst1q_f32(lanes + 4 * q, acc[i][j][q]);
      y[i * ldy + j] = tree16(lanes);
    }
}

template <int MR, int NR>
struct NeonK {
  static constexpr GemmTile fn = &kernel_neon<MR, NR>;
};

}  // namespace

// 2x2 tiles: 16 accumulator quads plus operands fit 32 registers.
const GemmVariant* gemm(Isa level) {
  static const GemmVariant neon = {&gemm_tile::tile_for<NeonK>, 2, 2, nullptr};
  return level == kNeon ? &neon : nullptr;
}

}  // namespace kev::arch
