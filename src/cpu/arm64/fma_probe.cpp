// The aarch64 peak probes for the benchmarks (bench/fma_peak.h): 12 independent chains of NEON
// FMLA on float32x4_t (enough to cover the FMLA latency on two pipes), or of FMUL then FADD; and
// of SDOT (int8 quadruples into int32 lanes, the w8a8 byte kernel's product) where the CPU has
// dotprod.
#include <arm_neon.h>

#include "cpu/arch.h"
#include "cpu/arm64/levels.h"

namespace kev::arch {
namespace {

double fma_chains_neon(long iters, bool fused) {
  float32x4_t acc[12];
  for (int i = 0; i < 12; ++i) acc[i] = vdupq_n_f32(0.5f + static_cast<float>(i));
  const float32x4_t a = vdupq_n_f32(0.999f), b = vdupq_n_f32(0.0001f);
  if (fused) {
    for (long n = 0; n < iters; ++n)
      for (int i = 0; i < 12; ++i) acc[i] = vfmaq_f32(b, acc[i], a);
  } else {
    for (long n = 0; n < iters; ++n)
      for (int i = 0; i < 12; ++i) acc[i] = vaddq_f32(vmulq_f32(acc[i], a), b);
  }
  float sink = 0;
  for (int i = 0; i < 12; ++i) sink += vgetq_lane_f32(acc[i], 0);
  volatile float keep = sink;
  (void)keep;
  return static_cast<double>(iters) * 12 * 4 * 2;
}

// GCC 12 takes the SDOT intrinsic only under an arch= target (as gemm_int8.cpp's kernel).
__attribute__((target("arch=armv8.2-a+dotprod"))) double sdot_chains(long iters) {
  int32x4_t acc[12];
  for (int i = 0; i < 12; ++i) acc[i] = vdupq_n_s32(i);
  const int8x16_t a = vdupq_n_s8(3), b = vdupq_n_s8(-2);
  for (long n = 0; n < iters; ++n)
    for (int i = 0; i < 12; ++i) acc[i] = vdotq_s32(acc[i], a, b);
  int32_t sink = 0;
  for (int i = 0; i < 12; ++i) sink ^= vgetq_lane_s32(acc[i], 0);
  volatile int32_t keep = sink;
  (void)keep;
  return static_cast<double>(iters) * 12 * 4 * 4 * 2;
}

}  // namespace

FmaChains fma_chains(Isa level) {
  return level == kNeon ? fma_chains_neon : nullptr;
}

// SDOT only: this family's other precision kernels multiply with NEON's widening forms.
DotChains dot_chains(DotProbe which) {
  return which == DotProbe::kInt8Sdot && cpu_has_dotprod() ? sdot_chains : nullptr;
}

}  // namespace kev::arch
