// GEMM: accuracy against a double-precision evaluation of the same sum, and the reproducibility
// promises of gemm.h (ISA-, batch- and thread-independence, bitwise).
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <tuple>
#include <vector>

#include "gemm_problem.h"
#include "kev/core/bf16.h"
#include "kev/cpu/gemm.h"

namespace kev {
namespace {

using gemm_test::Problem;
std::vector<float> run(const Problem& p, Isa isa, size_t threads) {
  std::vector<float> y(static_cast<size_t>(p.m * p.n), NAN);
  gemm_bf16_isa(isa, p.x.data(), p.m, p.k, p.mat(), y.data(), p.n, threads);
  return y;
}

TEST(Gemm, MatchesDoubleReference) {
  for (auto [m, k, n] :
       {std::tuple{1, 1, 1}, {7, 83, 11}, {5, 16, 9}, {13, 256, 33}, {4, 1000, 4}}) {
    Problem p = gemm_test::make_uniform(m, k, n, 7);
    for (Isa isa : supported_isas()) {
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
  Problem p = gemm_test::make_uniform(19, 211, 37, 11);
  std::vector<float> base = run(p, Isa::kPortable, 1);
  for (Isa isa : supported_isas())
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
  Problem p = gemm_test::make_uniform(6, 40, 10, 3);
  std::vector<uint16_t> shifted(p.w.size() + 1);
  std::copy(p.w.begin(), p.w.end(), shifted.begin() + 1);
  std::vector<float> xs(static_cast<size_t>(p.m * 50));
  for (int64_t i = 0; i < p.m; ++i)
    std::copy(p.x.begin() + i * p.k, p.x.begin() + (i + 1) * p.k, xs.begin() + i * 50);
  std::vector<float> want = run(p, Isa::kPortable, 1);
  for (Isa isa : supported_isas()) {
    std::vector<float> y(static_cast<size_t>(p.m * 12));
    gemm_bf16_isa(isa, xs.data(), p.m, 50, Bf16Matrix{shifted.data() + 1, p.n, p.k}, y.data(), 12,
                  2);
    for (int64_t i = 0; i < p.m; ++i)
      for (int64_t j = 0; j < p.n; ++j) EXPECT_EQ(y[i * 12 + j], want[i * p.n + j]);
  }
}

// The order gemm.h promises, written out independently of src/cpu/ (portable/gemm.cpp,
// x86/gemm.cpp, arm64/gemm.cpp): 16 lane sums, lane l taking k = l, l+16, ... by one fused
// multiply-add each, then the fixed tree.
std::vector<float> contract_order(const Problem& p) {
  std::vector<float> y(static_cast<size_t>(p.m * p.n));
  for (int64_t i = 0; i < p.m; ++i)
    for (int64_t j = 0; j < p.n; ++j) {
      float lane[16] = {};
      for (int64_t t = 0; t < p.k; ++t)
        lane[t % 16] = std::fma(p.x[i * p.k + t], bf16_to_f32(p.w[j * p.k + t]), lane[t % 16]);
      float a[8], b[4], c[2];
      for (int l = 0; l < 8; ++l) a[l] = lane[l] + lane[l + 8];
      for (int l = 0; l < 4; ++l) b[l] = a[l] + a[l + 4];
      for (int l = 0; l < 2; ++l) c[l] = b[l] + b[l + 2];
      y[i * p.n + j] = c[0] + c[1];
    }
  return y;
}

// Prefill-sized batches (the AVX2 and AVX-512 paths pack activations and weights lane by lane and
// run 6-row x 16-output tiles once a batch has >= 6 rows and >= 64 outputs; AVX-512 takes groups
// of 16 outputs four or two at a time: 560 outputs over 1-5 threads give chunks of 4, 3 and 2
// groups): rows and outputs not multiples of the tile, K with a tail that is not a multiple of
// 16, K < 16 (lanes that get no product), very long K, a 5-row batch (direct kernel) and a batch
// over two activation packs (32 MiB each: 906 rows at K = 9231, so 910 rows end in a second
// pack's partial tile). Every ISA, thread count, and a row alone (which takes the direct path)
// must give the contract's bits.
TEST(Gemm, PrefillBatchesMatchContractOrderBitwise) {
  std::vector<std::tuple<int64_t, int64_t, int64_t>> shapes = {
      {20, 1100, 131}, {6, 2085, 64}, {7, 16, 70},   {5, 600, 80},  {33, 4099, 77},
      {12, 5, 65},     {8, 9231, 96}, {9, 300, 560}, {1543, 40, 70}};
#if defined(__x86_64__)
  shapes.emplace_back(910, 9231, 64);  // the packs are the x86-64 family's
#endif
  for (auto [m, k, n] : shapes) {
    Problem p = gemm_test::make_uniform(m, k, n, static_cast<unsigned>(m * 7 + k));
    std::vector<float> want = contract_order(p);
    for (Isa isa : supported_isas())
      for (size_t threads : {1, 2, 3, 5})
        EXPECT_EQ(run(p, isa, threads), want)
            << isa_name(isa) << " threads=" << threads << " m=" << m << " k=" << k;
    for (int64_t r : std::initializer_list<int64_t>{0, m / 2, m - 1}) {
      Problem one{1, p.k, p.n,
                  std::vector<float>(p.x.begin() + r * p.k, p.x.begin() + (r + 1) * p.k), p.w};
      for (Isa isa : supported_isas()) {
        std::vector<float> y = run(one, isa, 2);
        for (int64_t j = 0; j < p.n; ++j)
          ASSERT_EQ(y[j], want[r * p.n + j]) << isa_name(isa) << " row " << r;
      }
    }
  }
}

// The packed path with a row stride wider than K, an output stride wider than N, and weights
// not 4-byte aligned.
TEST(Gemm, PrefillBatchStridesAndAlignment) {
  Problem p = gemm_test::make_uniform(11, 530, 70, 5);
  std::vector<float> want = contract_order(p);
  std::vector<uint16_t> shifted(p.w.size() + 1);
  std::copy(p.w.begin(), p.w.end(), shifted.begin() + 1);
  const int64_t ldx = 537, ldy = 75;
  std::vector<float> xs(static_cast<size_t>(p.m * ldx), NAN);
  for (int64_t i = 0; i < p.m; ++i)
    std::copy(p.x.begin() + i * p.k, p.x.begin() + (i + 1) * p.k, xs.begin() + i * ldx);
  for (Isa isa : supported_isas()) {
    std::vector<float> y(static_cast<size_t>(p.m * ldy), -7.0f);
    gemm_bf16_isa(isa, xs.data(), p.m, ldx, Bf16Matrix{shifted.data() + 1, p.n, p.k}, y.data(), ldy,
                  2);
    for (int64_t i = 0; i < p.m; ++i) {
      for (int64_t j = 0; j < p.n; ++j) ASSERT_EQ(y[i * ldy + j], want[i * p.n + j]);
      for (int64_t j = p.n; j < ldy; ++j) ASSERT_EQ(y[i * ldy + j], -7.0f);  // untouched
    }
  }
}

}  // namespace
}  // namespace kev
