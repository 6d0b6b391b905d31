// The x86-64 LoRA merge variants (merge.h's order, bit-identical to the portable one): the one
// vector body (src/cpu/bodies/merge_body.inc) over AVX2+FMA (8 lanes, 2 accumulators) and AVX-512
// (16 lanes, 4 accumulators).
#include <cstdint>

#include "cpu/arch.h"
#include "cpu/portable/portable.h"
#include "cpu/x86/levels.h"
#include "cpu/x86/target.h"

namespace kev::arch {
namespace {

#define KEV_OPS static inline __attribute__((always_inline, target("avx2,fma")))
namespace avx2 {
struct V {
  using F = __m256;
  static constexpr int64_t kWidth = 8, kUnroll = 2;
  KEV_OPS F zero() { return _mm256_setzero_ps(); }
  KEV_OPS F bcast(float f) { return _mm256_set1_ps(f); }
  KEV_OPS F load(const float* p) { return _mm256_loadu_ps(p); }
  KEV_OPS F fma(F a, F b, F c) { return _mm256_fmadd_ps(a, b, c); }
  // f32_to_bf16 on eight lanes (as 32-bit values): round to nearest even, NaN -> 0x7fc0.
  KEV_OPS __m256i round_bf16(F s) {
    const __m256i u = _mm256_castps_si256(s);
    const __m256i lsb = _mm256_and_si256(_mm256_srli_epi32(u, 16), _mm256_set1_epi32(1));
    const __m256i r = _mm256_srli_epi32(
        _mm256_add_epi32(u, _mm256_add_epi32(lsb, _mm256_set1_epi32(0x7fff))), 16);
    const __m256 nan = _mm256_cmp_ps(s, s, _CMP_UNORD_Q);
    return _mm256_blendv_epi8(r, _mm256_set1_epi32(0x7fc0), _mm256_castps_si256(nan));
  }
  KEV_OPS void store_merged(uint8_t* out, const uint8_t* w, F acc, F scale) {
    const __m128i wb = _mm_loadu_si128(reinterpret_cast<const __m128i*>(w));
    const F wf = _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(wb), 16));
    const __m256i r = round_bf16(_mm256_add_ps(wf, _mm256_mul_ps(acc, scale)));
    // Every lane is in [0, 0xffff], so the saturating pack keeps it.
    const __m128i packed =
        _mm_packus_epi32(_mm256_castsi256_si128(r), _mm256_extracti128_si256(r, 1));
    _mm_storeu_si128(reinterpret_cast<__m128i*>(out), packed);
  }
};
#define KEV_TARGET __attribute__((target("avx2,fma")))
#include "cpu/bodies/merge_body.inc"
#undef KEV_TARGET
}  // namespace avx2
#undef KEV_OPS

#define KEV_OPS static inline __attribute__((always_inline, target("avx512f,avx512bw,fma")))
namespace avx512 {
struct V {
  using F = __m512;
  static constexpr int64_t kWidth = 16, kUnroll = 4;
  KEV_OPS F zero() { return _mm512_setzero_ps(); }
  KEV_OPS F bcast(float f) { return _mm512_set1_ps(f); }
  KEV_OPS F load(const float* p) { return _mm512_loadu_ps(p); }
  KEV_OPS F fma(F a, F b, F c) { return _mm512_fmadd_ps(a, b, c); }
  KEV_OPS void store_merged(uint8_t* out, const uint8_t* w, F acc, F scale) {
    const __m256i wb = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(w));
    const F wf = _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(wb), 16));
    const F s = _mm512_add_ps(wf, _mm512_mul_ps(acc, scale));
    const __m512i u = _mm512_castps_si512(s);
    const __m512i lsb = _mm512_and_si512(_mm512_srli_epi32(u, 16), _mm512_set1_epi32(1));
    __m512i r = _mm512_srli_epi32(
        _mm512_add_epi32(u, _mm512_add_epi32(lsb, _mm512_set1_epi32(0x7fff))), 16);
    const __mmask16 nan = _mm512_cmp_ps_mask(s, s, _CMP_UNORD_Q);
    r = _mm512_mask_mov_epi32(r, nan, _mm512_set1_epi32(0x7fc0));
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(out), _mm512_cvtepi32_epi16(r));
  }
};
#define KEV_TARGET __attribute__((target("avx512f,avx512bw,fma")))
#include "cpu/bodies/merge_body.inc"
#undef KEV_TARGET
}  // namespace avx512
#undef KEV_OPS

}  // namespace

MergeRows merge(Isa level) {
  if (level == kAvx512) return &avx512::merge_rows;
  if (level == kAvx2) return &avx2::merge_rows;
  return nullptr;
}

}  // namespace kev::arch
