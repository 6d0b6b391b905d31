// The x86-64 pointer-head kernels (bit-identical to the portable ones): the shared body
// (src/cpu/bodies/head_kernels_body.inc) over 16 lanes as two AVX2 ymm halves, or one AVX-512 zmm.
#include "cpu/arch.h"
#include "cpu/x86/levels.h"
#include "cpu/x86/target.h"
#include "cpu/x86/tree16.h"

namespace kev::head_kernels {

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
  return x86::tree16(a.lo, a.hi);
}
// 16 ymm registers: keep accumulators + operands within them.
constexpr size_t kMaxNq = 4;
constexpr int kTileRows = 2;

#include "cpu/bodies/head_kernels_body.inc"
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
  return x86::tree16(a.x);
}
// 32 zmm registers: up to 16 accumulators per tile.
constexpr size_t kMaxNq = 8;
constexpr int kTileRows = 4;

#include "cpu/bodies/head_kernels_body.inc"
#undef KEV_HEAD_TARGET
}  // namespace avx512

}  // namespace kev::head_kernels

namespace kev::arch {

const head_kernels::KernelSet* head(Isa level) {
  if (level == kAvx512) return &head_kernels::avx512::kSet;
  if (level == kAvx2) return &head_kernels::avx2::kSet;
  return nullptr;
}

}  // namespace kev::arch
