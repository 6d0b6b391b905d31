// tree16 (src/cpu/bodies/kernel_order.h) on a 16-lane accumulator held as four NEON quads (lanes
// 4q .. 4q+3), for the family's vector kernels and head kernels (private to src/cpu/arm64/).
#pragma once
#include <arm_neon.h>

namespace kev::arm64 {

// (l, l+8) is quads (0, 2) and (1, 3); (l, l+4) the two results; then (l, l+2) the halves of
// that, and (0, 1): each a single rounding as in tree16.
inline float tree16(const float32x4_t (&q)[4]) {
  const float32x4_t s4 = vaddq_f32(vaddq_f32(q[0], q[2]), vaddq_f32(q[1], q[3]));
  const float32x2_t s2 = vadd_f32(vget_low_f32(s4), vget_high_f32(s4));
  return vget_lane_f32(s2, 0) + vget_lane_f32(s2, 1);
}

}  // namespace kev::arm64
