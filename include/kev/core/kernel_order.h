// Pieces every kernel family shares, so each is written once:
// - tree16: the fixed 16-lane reduction tree of the model GEMM, the vector dots and the pointer
//   head: s8[i] = l[i] + l[i+8], s4[i] = s8[i] + s8[i+4], s2[i] = s4[i] + s4[i+2],
//   s = s2[0] + s2[1], each addition rounded once. Every vector variant (AVX2, AVX-512, NEON)
//   reproduces exactly this tree from its registers.
// - KEV_X86 / KEV_ARM64: 1 when building for that architecture, 0 otherwise; architecture code
//   is compiled only under its own macro, so every other target builds the portable kernels.
// - KEV_TARGET_AVX2: the target attribute of the AVX2+FMA variants (x86-64 only).
#pragma once

#if defined(__x86_64__)
#define KEV_X86 1
#define KEV_TARGET_AVX2 __attribute__((target("avx2,fma")))
#else
#define KEV_X86 0
#endif
#if defined(__aarch64__)
#define KEV_ARM64 1
#else
#define KEV_ARM64 0
#endif

namespace kev {

inline float tree16(const float* l) {
  float s8[8], s4[4], s2[2];
  for (int i = 0; i < 8; ++i) s8[i] = l[i] + l[i + 8];
  for (int i = 0; i < 4; ++i) s4[i] = s8[i] + s8[i + 4];
  for (int i = 0; i < 2; ++i) s2[i] = s4[i] + s4[i + 2];
  return s2[0] + s2[1];
}

}  // namespace kev
