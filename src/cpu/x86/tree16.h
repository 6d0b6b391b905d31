// tree16 (src/cpu/bodies/kernel_order.h) on a 16-lane accumulator held in x86 registers, for the
// family's vector kernels and head kernels (private to src/cpu/x86/).
#pragma once
#include "cpu/x86/target.h"

namespace kev::x86 {

// Lanes 0-7 in lo, 8-15 in hi: (l, l+8) is lo + hi, then (l, l+4), (l, l+2), (0, 1), each a
// single rounding as in tree16. AVX2 only, so AVX-512 code can call it too.
__attribute__((target("avx2"))) inline float tree16(__m256 lo, __m256 hi) {
  const __m256 t = _mm256_add_ps(lo, hi);
  const __m128 u = _mm_add_ps(_mm256_castps256_ps128(t), _mm256_extractf128_ps(t, 1));
  const __m128 v = _mm_add_ps(u, _mm_movehl_ps(u, u));
  return _mm_cvtss_f32(_mm_add_ss(v, _mm_movehdup_ps(v)));
}

// The same tree on one 16-lane register (lanes 0-7 are its low half), for AVX-512 code.
__attribute__((target("avx512f,avx2"))) inline float tree16(__m512 v) {
  return tree16(_mm512_castps512_ps256(v),
                _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(v), 1)));
}

}  // namespace kev::x86
