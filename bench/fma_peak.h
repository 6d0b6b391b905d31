// The achievable FP32 FMA peak of this machine for one GEMM instruction set: every core runs
// independent FMA chains (enough of them to cover the FMA latency on two FMA pipes) of the
// widest vector that ISA has, and the best of a few tries is kept. The probe for an ISA is
// only called when the CPU has it (the caller picks it from gemm_isa_supported / the running
// ISA), so the benchmarks run on any x86-64 CPU.
#pragma once
#include <immintrin.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstddef>
#include <thread>
#include <vector>

#include "kev/model/gemm.h"

namespace kev::bench {

namespace detail {

inline double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

// 12 zmm chains (latency 4 x 2 pipes = 8 needed; 12 leaves slack).
__attribute__((target("avx512f"))) inline double peak_avx512_one_core(long iters) {
  __m512 acc[12];
  for (int i = 0; i < 12; ++i) acc[i] = _mm512_set1_ps(0.5f + static_cast<float>(i));
  const __m512 a = _mm512_set1_ps(0.999f), b = _mm512_set1_ps(0.0001f);
  auto t0 = std::chrono::steady_clock::now();
  for (long n = 0; n < iters; ++n)
    for (int i = 0; i < 12; ++i) acc[i] = _mm512_fmadd_ps(acc[i], a, b);
  double s = seconds_since(t0);
  alignas(64) float lanes[16];
  float sink = 0;
  for (int i = 0; i < 12; ++i) {
    _mm512_store_ps(lanes, acc[i]);
    sink += lanes[0];
  }
  volatile float keep = sink;
  (void)keep;
  return static_cast<double>(iters) * 12 * 16 * 2 / s / 1e9;
}

// 12 ymm chains.
__attribute__((target("avx2,fma"))) inline double peak_avx2_one_core(long iters) {
  __m256 acc[12];
  for (int i = 0; i < 12; ++i) acc[i] = _mm256_set1_ps(0.5f + static_cast<float>(i));
  const __m256 a = _mm256_set1_ps(0.999f), b = _mm256_set1_ps(0.0001f);
  auto t0 = std::chrono::steady_clock::now();
  for (long n = 0; n < iters; ++n)
    for (int i = 0; i < 12; ++i) acc[i] = _mm256_fmadd_ps(acc[i], a, b);
  double s = seconds_since(t0);
  alignas(32) float lanes[8];
  float sink = 0;
  for (int i = 0; i < 12; ++i) {
    _mm256_store_ps(lanes, acc[i]);
    sink += lanes[0];
  }
  volatile float keep = sink;
  (void)keep;
  return static_cast<double>(iters) * 12 * 8 * 2 / s / 1e9;
}

// Scalar: the scalar GEMM path's own arithmetic (one std::fma per step) on 12 chains.
inline double peak_scalar_one_core(long iters) {
  volatile float seed = 0.999f;
  float acc[12];
  for (int i = 0; i < 12; ++i) acc[i] = 0.5f + static_cast<float>(i);
  const float a = seed, b = 0.0001f;
  auto t0 = std::chrono::steady_clock::now();
  for (long n = 0; n < iters; ++n)
    for (int i = 0; i < 12; ++i) acc[i] = std::fma(acc[i], a, b);
  double s = seconds_since(t0);
  float sink = 0;
  for (float v : acc) sink += v;
  volatile float keep = sink;
  (void)keep;
  return static_cast<double>(iters) * 12 * 2 / s / 1e9;
}

inline double peak_one_core(GemmIsa isa) {
  double best = 0;
  for (int t = 0; t < 3; ++t) {
    switch (isa) {
      case GemmIsa::kAvx512:
        best = std::max(best, peak_avx512_one_core(20'000'000));
        break;
      case GemmIsa::kAvx2:
        best = std::max(best, peak_avx2_one_core(20'000'000));
        break;
      default:
        best = std::max(best, peak_scalar_one_core(20'000'000));
    }
  }
  return best;
}

}  // namespace detail

// GFLOP/s of FP32 FMAs with `isa`'s widest vector on `threads` cores at once (sum over cores).
// Returns 0 where the CPU lacks the ISA.
inline double fma_peak_gflops(GemmIsa isa, size_t threads) {
  if (!gemm_isa_supported(isa)) return 0;
  std::vector<double> r(threads);
  std::vector<std::thread> ts;
  for (size_t t = 0; t < threads; ++t)
    ts.emplace_back([&, t] { r[t] = detail::peak_one_core(isa); });
  for (auto& t : ts) t.join();
  double sum = 0;
  for (double v : r) sum += v;
  return sum;
}

}  // namespace kev::bench
