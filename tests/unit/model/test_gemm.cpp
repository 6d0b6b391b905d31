// GEMM: accuracy against a double-precision evaluation of the same sum, and the reproducibility
// promises of gemm.h (ISA-, batch- and thread-independence, bitwise).
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

#include "kev/core/bf16.h"
#include "kev/model/gemm.h"

namespace kev {
namespace {

struct Problem {
  int64_t m, k, n;
  std::vector<float> x;
  std::vector<uint16_t> w;
  Bf16Matrix mat() const { return {w.data(), n, k}; }
};

Problem make(int64_t m, int64_t k, int64_t n, unsigned seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> d(-1.0f, 1.0f);
  Problem p{m, k, n, std::vector<float>(static_cast<size_t>(m * k)),
            std::vector<uint16_t>(static_cast<size_t>(n * k))};
  for (auto& v : p.x) v = d(rng);
  for (auto& v : p.w) v = f32_to_bf16(d(rng));
  return p;
}

std::vector<float> run(const Problem& p, Isa isa, size_t threads) {
  std::vector<float> y(static_cast<size_t>(p.m * p.n), NAN);
  gemm_bf16_isa(isa, p.x.data(), p.m, p.k, p.mat(), y.data(), p.n, threads);
  return y;
}

std::vector<Isa> isas() {
  std::vector<Isa> out;
  for (Isa i : {Isa::kPortable, Isa::kAvx2, Isa::kAvx512})
    if (isa_supported(i)) out.push_back(i);
  return out;
}

TEST(Gemm, MatchesDoubleReference) {
  for (auto [m, k, n] :
       {std::tuple{1, 1, 1}, {7, 83, 11}, {5, 16, 9}, {13, 256, 33}, {4, 1000, 4}}) {
    Problem p = make(m, k, n, 7);
    for (Isa isa : isas()) {
      std::vector<float> y = run(p, isa, 2);
      for (int64_t i = 0; i < m; ++i)
        for (int64_t j = 0; j < n; ++j) {
          double ref = 0, mag = 0;
          for (int64_t t = 0; t < k; ++t) {
            double prod = double(p.x[i * k + t]) * bf16_to_f32(p.w[j * k + t]);
            ref += prod;
            mag += std::fabs(prod);
          }
          ASSERT_NEAR(y[i * n + j], ref, 1e-6 * mag + 1e-7)
              << isa_name(isa) << " m=" << m << " k=" << k << " n=" << n;
        }
    }
  }
}

TEST(Gemm, IsaThreadAndBatchIndependentBitwise) {
  Problem p = make(19, 211, 37, 11);
  std::vector<float> base = run(p, Isa::kPortable, 1);
  for (Isa isa : isas())
    for (size_t threads : {1, 2, 3}) EXPECT_EQ(run(p, isa, threads), base) << isa_name(isa);
  // Each row computed alone equals the same row inside the batch.
  for (int64_t r : {0, 5, 18}) {
    Problem one{1, p.k, p.n, std::vector<float>(p.x.begin() + r * p.k, p.x.begin() + (r + 1) * p.k),
                p.w};
    std::vector<float> y = run(one, best_gemm_isa(), 2);
    for (int64_t j = 0; j < p.n; ++j) EXPECT_EQ(y[j], base[r * p.n + j]);
  }
}

TEST(Gemm, UnalignedWeightsAndStrides) {
  Problem p = make(6, 40, 10, 3);
  std::vector<uint16_t> shifted(p.w.size() + 1);
  std::copy(p.w.begin(), p.w.end(), shifted.begin() + 1);
  std::vector<float> xs(static_cast<size_t>(p.m * 50));
  for (int64_t i = 0; i < p.m; ++i)
    std::copy(p.x.begin() + i * p.k, p.x.begin() + (i + 1) * p.k, xs.begin() + i * 50);
  std::vector<float> want = run(p, Isa::kPortable, 1);
  for (Isa isa : isas()) {
    std::vector<float> y(static_cast<size_t>(p.m * 12));
    gemm_bf16_isa(isa, xs.data(), p.m, 50, Bf16Matrix{shifted.data() + 1, p.n, p.k}, y.data(), 12,
                  2);
    for (int64_t i = 0; i < p.m; ++i)
      for (int64_t j = 0; j < p.n; ++j) EXPECT_EQ(y[i * 12 + j], want[i * p.n + j]);
  }
}

}  // namespace
}  // namespace kev
