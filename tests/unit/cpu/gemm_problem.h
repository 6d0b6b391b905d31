// A random matrix product for the GEMM unit tests (test_gemm, test_gemm_int8, test_gemm_avx512):
// x [m, k] FP32 and W [n, k] BF16, drawn from a seeded generator so a failure reproduces.
#pragma once
#include <cstdint>
#include <random>
#include <vector>

#include "kev/core/bf16.h"
#include "kev/cpu/matrix.h"

namespace kev::gemm_test {

struct Problem {
  int64_t m, k, n;
  std::vector<float> x;
  std::vector<uint16_t> w;
  Bf16Matrix mat() const { return {w.data(), n, k}; }
};

// x = draw(), W = bf16(w_scale * draw()), in that order, for any distribution `draw`.
template <typename Dist>
Problem make_problem(int64_t m, int64_t k, int64_t n, unsigned seed, Dist draw, float w_scale) {
  std::mt19937 rng(seed);
  Problem p{m, k, n, std::vector<float>(static_cast<size_t>(m * k)),
            std::vector<uint16_t>(static_cast<size_t>(n * k))};
  for (auto& v : p.x) v = draw(rng);
  for (auto& v : p.w) v = f32_to_bf16(w_scale * draw(rng));
  return p;
}

// Activations ~ N(0, 1), weights ~ 0.05 N(0, 1): the scale of a trained projection.
inline Problem make_normal(int64_t m, int64_t k, int64_t n, unsigned seed) {
  return make_problem(m, k, n, seed, std::normal_distribution<float>(0.0f, 1.0f), 0.05f);
}

// Both ~ U(-1, 1): full-range operands for accuracy and ordering checks.
inline Problem make_uniform(int64_t m, int64_t k, int64_t n, unsigned seed) {
  return make_problem(m, k, n, seed, std::uniform_real_distribution<float>(-1.0f, 1.0f), 1.0f);
}

// The quantization ranges' ends in whole blocks: 7 x 96 activations at +-2 (every value its
// block's largest magnitude, so +-Q), every third row zero; 33 x 96 weights at +-0.5 (+-127), the
// first block of each row zero.
inline Problem make_extreme_blocks() {
  Problem p{7, 96, 33, std::vector<float>(7 * 96), std::vector<uint16_t>(33 * 96)};
  for (int64_t i = 0; i < 7 * 96; ++i)
    p.x[static_cast<size_t>(i)] = (i / 96) % 3 == 2 ? 0.0f : ((i % 7) < 3 ? -2.0f : 2.0f);
  for (int64_t i = 0; i < 33 * 96; ++i)
    p.w[static_cast<size_t>(i)] = f32_to_bf16((i % 96) < 32 ? 0.0f : ((i % 5) < 2 ? -0.5f : 0.5f));
  return p;
}

}  // namespace kev::gemm_test
