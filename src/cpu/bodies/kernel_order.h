// The one 16-lane reduction tree of the model GEMM, the vector dots and the pointer head:
// s8[i] = l[i] + l[i+8], s4[i] = s8[i] + s8[i+4], s2[i] = s4[i] + s4[i+2], s = s2[0] + s2[1],
// each addition rounded once. Every vector variant (AVX2, AVX-512, NEON) reproduces exactly this
// tree from its registers. Private to the kernel layer.
#pragma once

namespace kev {

inline float tree16(const float* l) {
  float s8[8], s4[4], s2[2];
  for (int i = 0; i < 8; ++i) s8[i] = l[i] + l[i + 8];
  for (int i = 0; i < 4; ++i) s4[i] = s8[i] + s8[i + 4];
  for (int i = 0; i < 2; ++i) s2[i] = s4[i] + s4[i + 2];
  return s2[0] + s2[1];
}

}  // namespace kev
