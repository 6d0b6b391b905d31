// The aarch64 peak probe for the benchmarks (bench/fma_peak.h): 12 independent chains of NEON
// FMLA on float32x4_t (enough to cover the FMLA latency on two pipes), or of FMUL then FADD.
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

}  // namespace

FmaChains fma_chains(Isa level) {
  return level == kNeon ? fma_chains_neon : nullptr;
}

// No probes for the precision modes' instructions on this family yet (the benchmarks report
// their peaks as unknown).
DotChains dot_chains(DotProbe) {
  return nullptr;
}

}  // namespace kev::arch
