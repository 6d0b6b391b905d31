// The kernel variants (portable; x86-64: AVX2, AVX-512; aarch64: NEON): each defines a 16-lane
// vector type V and its operations, then includes the shared bodies. The 16-lane reduction tree is
// the same everywhere: s8[i] = a[i] + a[i+8], s4[i] = s8[i] + s8[i+4], s2[i] = s4[i] + s4[i+2], s =
// s2[0] + s2[1].
#include "head/head_kernels.h"

#include <cmath>
#include <cstring>

#include "kev/core/error.h"

#include "kev/core/kernel_order.h"

#if KEV_X86
// GCC 12 reports its own _mm*_undefined_*() placeholders inside some intrinsics as
// uninitialised once they are inlined; the warning is about the header, not this code.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
#include <immintrin.h>
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic pop
#endif
#define KEV_HEAD_X86 1
#endif
#if KEV_ARM64
#include <arm_neon.h>
#endif

namespace kev::head_kernels {

namespace portable {
#define KEV_HEAD_TARGET

struct V {
  float x[16];
};
inline V zero() {
  return V{};
}
inline V load(const float* p) {
  V v;
  std::memcpy(v.x, p, sizeof v.x);
  return v;
}
inline V load_part(const float* p, size_t n) {
  V v{};
  std::memcpy(v.x, p, n * sizeof(float));
  return v;
}
inline V bcast(float f) {
  V v;
  for (float& x : v.x) x = f;
  return v;
}
inline V fma(const V& a, const V& b, const V& c) {
  V r;
  for (int i = 0; i < 16; ++i) r.x[i] = std::fma(a.x[i], b.x[i], c.x[i]);
  return r;
}
inline void store(float* p, const V& v) {
  std::memcpy(p, v.x, sizeof v.x);
}
inline void store_part(float* p, const V& v, size_t n) {
  std::memcpy(p, v.x, n * sizeof(float));
}
inline float reduce(const V& a) {
  return tree16(a.x);
}
constexpr size_t kMaxNq = 4;
constexpr int rows_for(int) {
  return 1;
}
constexpr int tiles_for(int) {
  return 1;
}

#include "head/head_kernels_body.inc"
#undef KEV_HEAD_TARGET
}  // namespace portable

#ifdef KEV_HEAD_X86
namespace avx2 {
#define KEV_HEAD_TARGET __attribute__((target("avx2,fma")))

// 16 lanes as two 8-lane halves: lo = lanes 0..7, hi = lanes 8..15.
struct V {
  __m256 lo, hi;
};
KEV_HEAD_TARGET inline __m256i mask8(size_t n) {  // lanes < n set (n <= 8)
  const __m256i iota = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
  return _mm256_cmpgt_epi32(_mm256_set1_epi32(static_cast<int>(n)), iota);
}
KEV_HEAD_TARGET inline V zero() {
  return {_mm256_setzero_ps(), _mm256_setzero_ps()};
}
KEV_HEAD_TARGET inline V load(const float* p) {
  return {_mm256_loadu_ps(p), _mm256_loadu_ps(p + 8)};
}
KEV_HEAD_TARGET inline V load_part(const float* p, size_t n) {
  size_t nlo = n < 8 ? n : 8, nhi = n > 8 ? n - 8 : 0;
  return {_mm256_maskload_ps(p, mask8(nlo)), _mm256_maskload_ps(p + 8, mask8(nhi))};
}
KEV_HEAD_TARGET inline V bcast(float f) {
  return {_mm256_set1_ps(f), _mm256_set1_ps(f)};
}
KEV_HEAD_TARGET inline V fma(const V& a, const V& b, const V& c) {
  return {_mm256_fmadd_ps(a.lo, b.lo, c.lo), _mm256_fmadd_ps(a.hi, b.hi, c.hi)};
}
KEV_HEAD_TARGET inline void store(float* p, const V& v) {
  _mm256_storeu_ps(p, v.lo);
  _mm256_storeu_ps(p + 8, v.hi);
}
KEV_HEAD_TARGET inline void store_part(float* p, const V& v, size_t n) {
  size_t nlo = n < 8 ? n : 8, nhi = n > 8 ? n - 8 : 0;
  _mm256_maskstore_ps(p, mask8(nlo), v.lo);
  _mm256_maskstore_ps(p + 8, mask8(nhi), v.hi);
}
KEV_HEAD_TARGET inline float reduce(const V& a) {
  __m256 s8 = _mm256_add_ps(a.lo, a.hi);
  __m128 s4 = _mm_add_ps(_mm256_castps256_ps128(s8), _mm256_extractf128_ps(s8, 1));
  __m128 s2 = _mm_add_ps(s4, _mm_movehl_ps(s4, s4));
  return _mm_cvtss_f32(_mm_add_ss(s2, _mm_shuffle_ps(s2, s2, 1)));
}
// 16 ymm registers: keep accumulators + operands within them.
constexpr size_t kMaxNq = 4;
constexpr int rows_for(int nq) {
  return nq <= 2 ? 2 : 1;
}
constexpr int tiles_for(int nq) {
  return nq <= 2 ? 2 : 1;
}

#include "head/head_kernels_body.inc"
#undef KEV_HEAD_TARGET
}  // namespace avx2

namespace avx512 {
#define KEV_HEAD_TARGET __attribute__((target("avx512f")))

struct V {
  __m512 x;
};
KEV_HEAD_TARGET inline V zero() {
  return {_mm512_setzero_ps()};
}
KEV_HEAD_TARGET inline V load(const float* p) {
  return {_mm512_loadu_ps(p)};
}
KEV_HEAD_TARGET inline V load_part(const float* p, size_t n) {
  return {_mm512_maskz_loadu_ps(static_cast<__mmask16>((1u << n) - 1u), p)};
}
KEV_HEAD_TARGET inline V bcast(float f) {
  return {_mm512_set1_ps(f)};
}
KEV_HEAD_TARGET inline V fma(const V& a, const V& b, const V& c) {
  return {_mm512_fmadd_ps(a.x, b.x, c.x)};
}
KEV_HEAD_TARGET inline void store(float* p, const V& v) {
  _mm512_storeu_ps(p, v.x);
}
KEV_HEAD_TARGET inline void store_part(float* p, const V& v, size_t n) {
  _mm512_mask_storeu_ps(p, static_cast<__mmask16>((1u << n) - 1u), v.x);
}
KEV_HEAD_TARGET inline float reduce(const V& a) {
  __m256 lo = _mm512_castps512_ps256(a.x);
  __m256 hi = _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(a.x), 1));
  __m256 s8 = _mm256_add_ps(lo, hi);
  __m128 s4 = _mm_add_ps(_mm256_castps256_ps128(s8), _mm256_extractf128_ps(s8, 1));
  __m128 s2 = _mm_add_ps(s4, _mm_movehl_ps(s4, s4));
  return _mm_cvtss_f32(_mm_add_ss(s2, _mm_shuffle_ps(s2, s2, 1)));
}
// 32 zmm registers: up to 16 accumulators per tile.
constexpr size_t kMaxNq = 8;
constexpr int rows_for(int nq) {
  return nq <= 4 ? 4 : 2;
}
constexpr int tiles_for(int nq) {
  return nq <= 4 ? 4 : 2;
}

#include "head/head_kernels_body.inc"
#undef KEV_HEAD_TARGET
}  // namespace avx512
#endif

#if KEV_ARM64
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
// tree16: s8 = lanes (i, i+8) are quarters (0, 2) and (1, 3); s4 = (i, i+4) the two halves of
// s8; s2 = (i, i+2) the halves of s4; then (0, 1).
inline float reduce(const V& a) {
  const float32x4_t s8lo = vaddq_f32(a.q[0], a.q[2]), s8hi = vaddq_f32(a.q[1], a.q[3]);
  const float32x4_t s4 = vaddq_f32(s8lo, s8hi);
  const float32x2_t s2 = vadd_f32(vget_low_f32(s4), vget_high_f32(s4));
  return vget_lane_f32(s2, 0) + vget_lane_f32(s2, 1);
}
// 32 quad registers: four per 16-lane vector.
constexpr size_t kMaxNq = 4;
constexpr int rows_for(int nq) {
  return nq <= 2 ? 2 : 1;
}
constexpr int tiles_for(int nq) {
  return nq <= 2 ? 2 : 1;
}

#include "head/head_kernels_body.inc"
#undef KEV_HEAD_TARGET
}  // namespace neon
#endif

}  // namespace kev::head_kernels

namespace kev {

Isa head_isa() {
  static const Isa isa = dispatch_isa("KEV_HEAD_ISA");
  return isa;
}

namespace head_kernels {

const KernelSet& kernels(Isa isa) {
  if (!isa_supported(isa))
    fail(ErrorKind::kUnsupported, "this CPU cannot run the {} pointer-head kernels", isa_name(isa));
  switch (isa) {
#ifdef KEV_HEAD_X86
    case Isa::kAvx512:
      return avx512::kSet;
    case Isa::kAvx2:
      return avx2::kSet;
#endif
#if KEV_ARM64
    case Isa::kNeon:
      return neon::kSet;
#endif
    default:
      return portable::kSet;
  }
}

}  // namespace head_kernels
}  // namespace kev
