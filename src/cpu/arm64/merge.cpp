// The aarch64 LoRA merge variant (merge.h's order, bit-identical to the portable one): the one
// vector body (src/cpu/bodies/merge_body.inc) over NEON quads (4 lanes, 4 accumulators; FMLA is
// fused).
#include <arm_neon.h>

#include <cstdint>
#include <cstring>

#include "cpu/arch.h"
#include "cpu/arm64/levels.h"
#include "cpu/portable/portable.h"

namespace kev::arch {
namespace {

namespace neon {
struct V {
  using F = float32x4_t;
  static constexpr int64_t kWidth = 4, kUnroll = 4;
  static F zero() { return vdupq_n_f32(0.0f); }
  static F bcast(float f) { return vdupq_n_f32(f); }
  static F load(const float* p) { return vld1q_f32(p); }
  static F fma(F a, F b, F c) { return vfmaq_f32(c, a, b); }
  // f32_to_bf16 on four lanes: round to nearest even, NaN -> 0x7fc0.
  static uint16x4_t round_bf16(F s) {
    const uint32x4_t u = vreinterpretq_u32_f32(s);
    const uint32x4_t lsb = vandq_u32(vshrq_n_u32(u, 16), vdupq_n_u32(1));
    const uint32x4_t r = vshrq_n_u32(vaddq_u32(u, vaddq_u32(lsb, vdupq_n_u32(0x7fff))), 16);
    const uint32x4_t number = vceqq_f32(s, s);  // all ones unless NaN
    return vmovn_u32(vbslq_u32(number, r, vdupq_n_u32(0x7fc0)));
  }
  static void store_merged(uint8_t* out, const uint8_t* w, F acc, F scale) {
    uint16_t wb[4], r[4];
    std::memcpy(wb, w, sizeof wb);  // the mapping may be unaligned
    const F wf = vreinterpretq_f32_u32(vshll_n_u16(vld1_u16(wb), 16));
    vst1_u16(r, round_bf16(vaddq_f32(wf, vmulq_f32(acc, scale))));
    std::memcpy(out, r, sizeof r);
  }
};
#define KEV_TARGET
#include "cpu/bodies/merge_body.inc"
#undef KEV_TARGET
}  // namespace neon

}  // namespace

MergeRows merge(Isa level) {
  return level == kNeon ? &neon::merge_rows : nullptr;
}

}  // namespace kev::arch
