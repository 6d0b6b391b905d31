#include "kev/export/merge.h"

#include "kev/core/kernel_order.h"

#if KEV_X86
// GCC 12's AVX-512 headers build some intrinsics from _mm512_undefined_*(), which trips a
// false -Wmaybe-uninitialized when inlined; the values are fully defined.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
#include <immintrin.h>
#endif
#if KEV_ARM64
#include <arm_neon.h>
#endif

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <string_view>

#include "kev/core/bf16.h"
#include "kev/core/error.h"

namespace kev {
namespace {

inline float merged_f32(const float* b_row, const float* a, int64_t rank, int64_t cols, int64_t j,
                        float w, float scale) {
  float acc = 0.0f;
  for (int64_t p = 0; p < rank; ++p) acc = std::fma(b_row[p], a[p * cols + j], acc);
  float t = acc * scale;
  return w + t;
}

// Columns [j0, cols) of one row, scalar.
void merge_row_tail(const uint8_t* w_row, const float* b_row, const float* a, int64_t rank,
                    int64_t cols, float scale, int64_t j0, uint8_t* out_row) {
  for (int64_t j = j0; j < cols; ++j) {
    uint16_t wb;
    std::memcpy(&wb, w_row + 2 * j, 2);
    uint16_t r = f32_to_bf16(merged_f32(b_row, a, rank, cols, j, bf16_to_f32(wb), scale));
    std::memcpy(out_row + 2 * j, &r, 2);
  }
}

void merge_scalar(const uint8_t* w, const float* b, const float* a, int64_t rank, int64_t cols,
                  float scale, int64_t rows, uint8_t* out) {
  for (int64_t i = 0; i < rows; ++i)
    merge_row_tail(w + 2 * i * cols, b + i * rank, a, rank, cols, scale, 0, out + 2 * i * cols);
}

#if KEV_X86
KEV_TARGET_AVX2 inline __m256i round_bf16_avx2(__m256 s) {
  __m256i u = _mm256_castps_si256(s);
  __m256i lsb = _mm256_and_si256(_mm256_srli_epi32(u, 16), _mm256_set1_epi32(1));
  __m256i r =
      _mm256_srli_epi32(_mm256_add_epi32(u, _mm256_add_epi32(lsb, _mm256_set1_epi32(0x7fff))), 16);
  __m256 nan = _mm256_cmp_ps(s, s, _CMP_UNORD_Q);
  return _mm256_blendv_epi8(r, _mm256_set1_epi32(0x7fc0), _mm256_castps_si256(nan));
}

KEV_TARGET_AVX2 void merge_avx2(const uint8_t* w, const float* b, const float* a, int64_t rank,
                                int64_t cols, float scale, int64_t rows, uint8_t* out) {
  const __m256 vscale = _mm256_set1_ps(scale);
  for (int64_t i = 0; i < rows; ++i) {
    const uint8_t* w_row = w + 2 * i * cols;
    const float* b_row = b + i * rank;
    uint8_t* out_row = out + 2 * i * cols;
    int64_t j = 0;
    for (; j + 16 <= cols; j += 16) {
      __m256 acc0 = _mm256_setzero_ps(), acc1 = _mm256_setzero_ps();
      for (int64_t p = 0; p < rank; ++p) {
        __m256 bp = _mm256_set1_ps(b_row[p]);
        const float* ap = a + p * cols + j;
        acc0 = _mm256_fmadd_ps(bp, _mm256_loadu_ps(ap), acc0);
        acc1 = _mm256_fmadd_ps(bp, _mm256_loadu_ps(ap + 8), acc1);
      }
      __m256i wb = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(w_row + 2 * j));
      __m256 w0 = _mm256_castsi256_ps(
          _mm256_slli_epi32(_mm256_cvtepu16_epi32(_mm256_castsi256_si128(wb)), 16));
      __m256 w1 = _mm256_castsi256_ps(
          _mm256_slli_epi32(_mm256_cvtepu16_epi32(_mm256_extracti128_si256(wb, 1)), 16));
      __m256i r0 = round_bf16_avx2(_mm256_add_ps(w0, _mm256_mul_ps(acc0, vscale)));
      __m256i r1 = round_bf16_avx2(_mm256_add_ps(w1, _mm256_mul_ps(acc1, vscale)));
      // packus works within 128-bit lanes; the permute restores element order.
      __m256i packed = _mm256_permute4x64_epi64(_mm256_packus_epi32(r0, r1), 0xD8);
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(out_row + 2 * j), packed);
    }
    merge_row_tail(w_row, b_row, a, rank, cols, scale, j, out_row);
  }
}

__attribute__((target("avx512f,avx512bw,fma"))) inline __m256i merged_avx512(const uint8_t* w_at,
                                                                             __m512 acc,
                                                                             __m512 vscale) {
  __m256i wb = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(w_at));
  __m512 wf = _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(wb), 16));
  __m512 s = _mm512_add_ps(wf, _mm512_mul_ps(acc, vscale));
  __m512i u = _mm512_castps_si512(s);
  __m512i lsb = _mm512_and_si512(_mm512_srli_epi32(u, 16), _mm512_set1_epi32(1));
  __m512i r =
      _mm512_srli_epi32(_mm512_add_epi32(u, _mm512_add_epi32(lsb, _mm512_set1_epi32(0x7fff))), 16);
  __mmask16 nan = _mm512_cmp_ps_mask(s, s, _CMP_UNORD_Q);
  r = _mm512_mask_mov_epi32(r, nan, _mm512_set1_epi32(0x7fc0));
  return _mm512_cvtepi32_epi16(r);
}

__attribute__((target("avx512f,avx512bw,fma"))) void merge_avx512(const uint8_t* w, const float* b,
                                                                  const float* a, int64_t rank,
                                                                  int64_t cols, float scale,
                                                                  int64_t rows, uint8_t* out) {
  const __m512 vscale = _mm512_set1_ps(scale);
  for (int64_t i = 0; i < rows; ++i) {
    const uint8_t* w_row = w + 2 * i * cols;
    const float* b_row = b + i * rank;
    uint8_t* out_row = out + 2 * i * cols;
    int64_t j = 0;
    // Four independent accumulators hide the FMA latency; each still sums p in order.
    for (; j + 64 <= cols; j += 64) {
      __m512 acc0 = _mm512_setzero_ps(), acc1 = _mm512_setzero_ps();
      __m512 acc2 = _mm512_setzero_ps(), acc3 = _mm512_setzero_ps();
      for (int64_t p = 0; p < rank; ++p) {
        __m512 bp = _mm512_set1_ps(b_row[p]);
        const float* ap = a + p * cols + j;
        acc0 = _mm512_fmadd_ps(bp, _mm512_loadu_ps(ap), acc0);
        acc1 = _mm512_fmadd_ps(bp, _mm512_loadu_ps(ap + 16), acc1);
        acc2 = _mm512_fmadd_ps(bp, _mm512_loadu_ps(ap + 32), acc2);
        acc3 = _mm512_fmadd_ps(bp, _mm512_loadu_ps(ap + 48), acc3);
      }
      __m512 accs[4] = {acc0, acc1, acc2, acc3};
      for (int k = 0; k < 4; ++k)
        _mm256_storeu_si256(reinterpret_cast<__m256i*>(out_row + 2 * (j + 16 * k)),
                            merged_avx512(w_row + 2 * (j + 16 * k), accs[k], vscale));
    }
    for (; j + 16 <= cols; j += 16) {
      __m512 acc = _mm512_setzero_ps();
      for (int64_t p = 0; p < rank; ++p)
        acc = _mm512_fmadd_ps(_mm512_set1_ps(b_row[p]), _mm512_loadu_ps(a + p * cols + j), acc);
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(out_row + 2 * j),
                          merged_avx512(w_row + 2 * j, acc, vscale));
    }
    merge_row_tail(w_row, b_row, a, rank, cols, scale, j, out_row);
  }
}
#endif  // KEV_X86

#if KEV_ARM64
// f32_to_bf16 on four lanes: round to nearest even, NaN -> 0x7fc0.
inline uint16x4_t round_bf16_neon(float32x4_t s) {
  const uint32x4_t u = vreinterpretq_u32_f32(s);
  const uint32x4_t lsb = vandq_u32(vshrq_n_u32(u, 16), vdupq_n_u32(1));
  const uint32x4_t r = vshrq_n_u32(vaddq_u32(u, vaddq_u32(lsb, vdupq_n_u32(0x7fff))), 16);
  const uint32x4_t number = vceqq_f32(s, s);  // all ones unless NaN
  return vmovn_u32(vbslq_u32(number, r, vdupq_n_u32(0x7fc0)));
}

// 16 columns at a time in four quads: per column the scalar order (FMLA is fused, p ascending;
// then one multiply by scale and one add to the weight).
void merge_neon(const uint8_t* w, const float* b, const float* a, int64_t rank, int64_t cols,
                float scale, int64_t rows, uint8_t* out) {
  const float32x4_t vscale = vdupq_n_f32(scale);
  for (int64_t i = 0; i < rows; ++i) {
    const uint8_t* w_row = w + 2 * i * cols;
    const float* b_row = b + i * rank;
    uint8_t* out_row = out + 2 * i * cols;
    int64_t j = 0;
    for (; j + 16 <= cols; j += 16) {
      float32x4_t acc[4];
      for (int q = 0; q < 4; ++q) acc[q] = vdupq_n_f32(0.0f);
      for (int64_t p = 0; p < rank; ++p) {
        const float32x4_t bp = vdupq_n_f32(b_row[p]);
        const float* ap = a + p * cols + j;
        for (int q = 0; q < 4; ++q) acc[q] = vfmaq_f32(acc[q], bp, vld1q_f32(ap + 4 * q));
      }
      uint16_t wb[16], r[16];
      std::memcpy(wb, w_row + 2 * j, sizeof wb);  // the mapping may be unaligned
      for (int q = 0; q < 4; ++q) {
        const float32x4_t wf = vreinterpretq_f32_u32(vshll_n_u16(vld1_u16(wb + 4 * q), 16));
        vst1_u16(r + 4 * q, round_bf16_neon(vaddq_f32(wf, vmulq_f32(acc[q], vscale))));
      }
      std::memcpy(out_row + 2 * j, r, sizeof r);
    }
    merge_row_tail(w_row, b_row, a, rank, cols, scale, j, out_row);
  }
}
#endif  // KEV_ARM64

}  // namespace

Isa merge_isa() {
  static const Isa isa = dispatch_isa("KEV_MERGE_ISA");
  return isa;
}

void merge_lora_rows(const void* w, const float* b, const float* a, int64_t rank, int64_t cols,
                     float scale, int64_t rows, void* out, Isa isa) {
  if (!isa_supported(isa))
    fail(ErrorKind::kUnsupported, "this CPU cannot run the {} merge kernels", isa_name(isa));
  auto* wp = static_cast<const uint8_t*>(w);
  auto* op = static_cast<uint8_t*>(out);
  switch (isa) {
#if KEV_X86
    case Isa::kAvx512:
      merge_avx512(wp, b, a, rank, cols, scale, rows, op);
      break;
    case Isa::kAvx2:
      merge_avx2(wp, b, a, rank, cols, scale, rows, op);
      break;
#endif
#if KEV_ARM64
    case Isa::kNeon:
      merge_neon(wp, b, a, rank, cols, scale, rows, op);
      break;
#endif
    default:
      merge_scalar(wp, b, a, rank, cols, scale, rows, op);
      break;
  }
}

}  // namespace kev
