// The aarch64 vector kernels (vec.h's order, bit-identical to the portable loops): a NEON
// dot_rows; gdn_steps runs the portable loop.
#include <arm_neon.h>

#include "cpu/arch.h"

namespace kev::arch {
namespace {

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

}  // namespace

const VecVariant* vec(Isa level) {
  static const VecVariant neon = {Isa::kNeon, &dot_rows_neon, nullptr};
  return level == Isa::kNeon ? &neon : nullptr;
}

}  // namespace kev::arch
