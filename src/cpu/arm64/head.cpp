// The aarch64 pointer-head kernels (bit-identical to the portable ones): the shared body
// (src/cpu/bodies/head_kernels_body.inc) over 16 lanes as four NEON quads.
#include <arm_neon.h>

#include <cstring>

#include "cpu/arch.h"
#include "cpu/arm64/levels.h"
#include "cpu/arm64/tree16.h"

namespace kev::head_kernels {

namespace neon {
#define KEV_HEAD_TARGET

// 16 lanes as four quarters: q[i] = lanes 4i .. 4i+3.
struct V {
  float32x4_t q[4];
};
inline V zero() {
  const float32x4_t z = vdupq_n_f32(0.0f);
  return {{z, z, z, z}};
}
inline V load(const float* p) {
  return {{vld1q_f32(p), vld1q_f32(p + 4), vld1q_f32(p + 8), vld1q_f32(p + 12)}};
}
inline V load_part(const float* p, size_t n) {
  float t[16] = {};
  std::memcpy(t, p, n * sizeof(float));
  return load(t);
}
inline V bcast(float f) {
  const float32x4_t b = vdupq_n_f32(f);
  return {{b, b, b, b}};
}
inline V fma(const V& a, const V& b, const V& c) {  // c + a * b, one rounding (FMLA)
  V r;
  for (int i = 0; i < 4; ++i) r.q[i] = vfmaq_f32(c.q[i], a.q[i], b.q[i]);
  return r;
}
inline void store(float* p, const V& v) {
  for (int i = 0; i < 4; ++i) vst1q_f32(p + 4 * i, v.q[i]);
}
inline void store_part(float* p, const V& v, size_t n) {
  float t[16];
  store(t, v);
  std::memcpy(p, t, n * sizeof(float));
}
inline float reduce(const V& a) {
  return arm64::tree16(a.q);
}
// 32 quad registers: four per 16-lane vector.
constexpr size_t kMaxNq = 4;
constexpr int kTileRows = 2;

#include "cpu/bodies/head_kernels_body.inc"
#undef KEV_HEAD_TARGET
}  // namespace neon

}  // namespace kev::head_kernels

namespace kev::arch {

const head_kernels::KernelSet* head(Isa level) {
  return level == kNeon ? &head_kernels::neon::kSet : nullptr;
}

}  // namespace kev::arch
