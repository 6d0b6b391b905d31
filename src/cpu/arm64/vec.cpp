// The aarch64 vector kernels (vec.h's order, bit-identical to the portable loops): a NEON
// dot_rows; gdn_steps runs the portable loop.
#include <arm_neon.h>

#include "cpu/arch.h"
#include "cpu/arm64/tree16.h"

namespace kev::arch {
namespace {

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
    out[r] = arm64::tree16(s0);
    out[r + 1] = arm64::tree16(s1);
  }
  for (; r < rows; ++r) {
    const float* xr = x + r * ld;
    float32x4_t s0[4];
    for (int q = 0; q < 4; ++q) s0[q] = vdupq_n_f32(0.0f);
    for (int64_t i = 0; i < n; i += 16)
      for (int q = 0; q < 4; ++q)
        s0[q] = vaddq_f32(s0[q], vmulq_f32(vld1q_f32(a + i + 4 * q), vld1q_f32(xr + i + 4 * q)));
    out[r] = arm64::tree16(s0);
  }
}

}  // namespace

const VecVariant* vec(Isa level) {
  static const VecVariant neon = {Isa::kNeon, &dot_rows_neon, nullptr};
  return level == Isa::kNeon ? &neon : nullptr;
}

}  // namespace kev::arch
