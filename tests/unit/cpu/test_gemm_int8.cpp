// Int8 GEMM: the quantization rule, accuracy against a double evaluation of the unquantized
// product, and the reproducibility promises of gemm_int8.h (ISA-, batch- and
// thread-independence, bitwise).
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "gemm_problem.h"
#include "kev/core/bf16.h"
#include "kev/cpu/gemm_int8.h"

namespace kev {
namespace {

using gemm_test::Problem;
std::vector<float> run(const Problem& p, const Int8Matrix& q, Isa isa, size_t threads) {
  std::vector<float> y(static_cast<size_t>(p.m * p.n), NAN);
  gemm_int8_isa(isa, p.x.data(), p.m, p.k, q, y.data(), p.n, threads);
  return y;
}

TEST(GemmInt8, QuantizeRowRule) {
  std::vector<float> v(40, 0.0f);
  v[0] = 2.0f;
  v[1] = -1.0f;
  v[2] = 0.5f;
  v[33] = -3.0f;
  std::vector<int8_t> q(64, 99);
  float s[2];
  quantize_row_int8(v.data(), 40, q.data(), s);
  EXPECT_FLOAT_EQ(s[0], 2.0f / 127.0f);
  EXPECT_EQ(q[0], 127);
  EXPECT_EQ(q[1], -64);  // -63.5 rounds to even
  EXPECT_EQ(q[2], 32);   // 31.75
  EXPECT_EQ(q[3], 0);
  EXPECT_FLOAT_EQ(s[1], 3.0f / 127.0f);
  EXPECT_EQ(q[33], -127);
  for (int i = 40; i < 64; ++i) EXPECT_EQ(q[i], 0) << i;  // padding
  std::vector<float> zero(32, 0.0f);
  quantize_row_int8(zero.data(), 32, q.data(), s);
  EXPECT_EQ(s[0], 0.0f);
  EXPECT_EQ(q[5], 0);
}

TEST(GemmInt8, CloseToUnquantizedProduct) {
  for (auto [m, k, n] : {std::tuple{1, 1, 1},
                         {7, 83, 11},
                         {5, 32, 16},
                         {13, 256, 33},
                         {4, 1000, 4},
                         {9, 1024, 70}}) {
    Problem p = gemm_test::make_normal(m, k, n, 11);
    Int8Matrix q = quantize_int8(p.mat(), 2);
    for (Isa isa : supported_isas()) {
      std::vector<float> y = run(p, q, isa, 2);
      double err2 = 0, ref2 = 0;
      for (int64_t i = 0; i < m; ++i)
        for (int64_t j = 0; j < n; ++j) {
          double ref = 0, mag = 0;
          for (int64_t t = 0; t < k; ++t) {
            double prod = double(p.x[i * k + t]) * bf16_to_f32(p.w[j * k + t]);
            ref += prod;
            mag += std::fabs(prod);
          }
          // Each factor is off by at most half a step (amax / 254) of its block.
          ASSERT_NEAR(y[i * n + j], ref, 0.03 * mag + 1e-6)
              << isa_name(isa) << " m=" << m << " k=" << k << " n=" << n;
          err2 += (y[i * n + j] - ref) * (y[i * n + j] - ref);
          ref2 += ref * ref;
        }
      if (k >= 256) {
        EXPECT_LT(std::sqrt(err2 / ref2), 0.02) << isa_name(isa) << " k=" << k;
      }
    }
  }
}

TEST(GemmInt8, BitwiseAcrossIsaBatchAndThreads) {
  Problem p = gemm_test::make_normal(23, 700, 53, 5);
  Int8Matrix q = quantize_int8(p.mat(), 1);
  EXPECT_EQ(q.scale, quantize_int8(p.mat(), 3).scale);
  std::vector<float> ref = run(p, q, Isa::kPortable, 1);
  for (Isa isa : supported_isas())
    for (size_t threads : {1, 2, 3, 8}) {
      std::vector<float> y = run(p, q, isa, threads);
      ASSERT_EQ(0, std::memcmp(y.data(), ref.data(), y.size() * 4))
          << isa_name(isa) << " threads=" << threads;
    }
  // Any sub-batch of rows gives the same rows.
  for (Isa isa : supported_isas())
    for (int64_t first : {0, 3, 22})
      for (int64_t count : {1, 2, 5}) {
        if (first + count > p.m) continue;
        std::vector<float> y(static_cast<size_t>(count * p.n));
        gemm_int8_isa(isa, p.x.data() + first * p.k, count, p.k, q, y.data(), p.n, 2);
        ASSERT_EQ(0, std::memcmp(y.data(), ref.data() + first * p.n, y.size() * 4))
            << isa_name(isa) << " first=" << first << " count=" << count;
      }
}

// Every level against portable, bitwise, on shapes that reach each tile edge of every kernel: K a
// multiple of the block or not (a zero-padded last block), row counts below, at and past the
// tiles (AVX2 6 rows, NEON 4), outputs short of, at and past a 16-output group. One thread: the
// tile edges, not the split over threads (BitwiseAcrossIsaBatchAndThreads covers that).
TEST(GemmInt8, TileEdgesBitwiseOnEveryIsa) {
  for (auto [m, k, n] : {std::tuple<int64_t, int64_t, int64_t>{1, 1, 1},
                         {3, 31, 17},
                         {4, 32, 16},
                         {5, 33, 15},
                         {6, 64, 32},
                         {7, 95, 33},
                         {9, 130, 7}}) {
    Problem p = gemm_test::make_uniform(m, k, n, static_cast<unsigned>(m * 1000 + k + n));
    Int8Matrix q = quantize_int8(p.mat(), 1);
    const std::vector<float> ref = run(p, q, Isa::kPortable, 1);
    for (Isa isa : supported_isas()) {
      const std::vector<float> y = run(p, q, isa, 1);
      ASSERT_EQ(0, std::memcmp(y.data(), ref.data(), y.size() * 4))
          << isa_name(isa) << " m=" << m << " k=" << k << " n=" << n;
    }
  }
}

}  // namespace
}  // namespace kev
