// The x86-64 peak probes for the benchmarks (bench/fma_peak.h): 12 independent chains of the
// level's widest FMA (latency 4 x 2 pipes = 8 needed; 12 leaves slack), or of a multiply then an
// add (latency 8, two operations a step: 12 chains keep 3 in flight a cycle).
#include "cpu/arch.h"
#include "cpu/x86/levels.h"
#include "cpu/x86/target.h"

namespace kev::arch {
namespace {

KEV_TARGET_AVX512 double fma_chains_avx512(long iters, bool fused) {
  __m512 acc[12];
  for (int i = 0; i < 12; ++i) acc[i] = _mm512_set1_ps(0.5f + static_cast<float>(i));
  const __m512 a = _mm512_set1_ps(0.999f), b = _mm512_set1_ps(0.0001f);
  if (fused) {
    for (long n = 0; n < iters; ++n)
      for (int i = 0; i < 12; ++i) acc[i] = _mm512_fmadd_ps(acc[i], a, b);
  } else {
    for (long n = 0; n < iters; ++n)
      for (int i = 0; i < 12; ++i) acc[i] = _mm512_add_ps(_mm512_mul_ps(acc[i], a), b);
  }
  alignas(64) float lanes[16];
  float sink = 0;
  for (int i = 0; i < 12; ++i) {
    _mm512_store_ps(lanes, acc[i]);
    sink += lanes[0];
  }
  volatile float keep = sink;
  (void)keep;
  return static_cast<double>(iters) * 12 * 16 * 2;
}

KEV_TARGET_AVX2 double fma_chains_avx2(long iters, bool fused) {
  __m256 acc[12];
  for (int i = 0; i < 12; ++i) acc[i] = _mm256_set1_ps(0.5f + static_cast<float>(i));
  const __m256 a = _mm256_set1_ps(0.999f), b = _mm256_set1_ps(0.0001f);
  if (fused) {
    for (long n = 0; n < iters; ++n)
      for (int i = 0; i < 12; ++i) acc[i] = _mm256_fmadd_ps(acc[i], a, b);
  } else {
    for (long n = 0; n < iters; ++n)
      for (int i = 0; i < 12; ++i) acc[i] = _mm256_add_ps(_mm256_mul_ps(acc[i], a), b);
  }
  alignas(32) float lanes[8];
  float sink = 0;
  for (int i = 0; i < 12; ++i) {
    _mm256_store_ps(lanes, acc[i]);
    sink += lanes[0];
  }
  volatile float keep = sink;
  (void)keep;
  return static_cast<double>(iters) * 12 * 8 * 2;
}

}  // namespace

FmaChains fma_chains(Isa level) {
  if (level == kAvx512) return fma_chains_avx512;
  if (level == kAvx2) return fma_chains_avx2;
  return nullptr;
}

}  // namespace kev::arch
