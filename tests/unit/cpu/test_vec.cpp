// The recurrent gated-delta step against the update written out plainly (two full passes
// over the state, the order the header states), bitwise, over several steps and shapes.
#include <gtest/gtest.h>

#include <cmath>

#include <algorithm>
#include <bit>
#include <cstdint>
#include <limits>
#include <random>
#include <string>
#include <tuple>
#include <vector>

#include "kev/core/error.h"
#include "kev/cpu/isa.h"
#include "kev/cpu/vec.h"

namespace kev {
namespace {

// S *= eg; m = S^T k (ascending i); delta = beta (v - m); S += k delta^T; o = S^T q.
void plain_step(std::vector<float>& s, int64_t dk, int64_t dv, float eg, const float* k,
                const float* q, const float* v, float beta, float* o) {
  std::vector<float> m(static_cast<size_t>(dv), 0.0f);
  for (int64_t i = 0; i < dk; ++i)
    for (int64_t j = 0; j < dv; ++j) {
      float& e = s[static_cast<size_t>(i * dv + j)];
      e = e * eg;
      float p = k[i] * e;
      m[static_cast<size_t>(j)] = m[static_cast<size_t>(j)] + p;
    }
  for (int64_t j = 0; j < dv; ++j) {
    float diff = v[j] - m[static_cast<size_t>(j)];
    m[static_cast<size_t>(j)] = beta * diff;
    o[j] = 0.0f;
  }
  for (int64_t i = 0; i < dk; ++i)
    for (int64_t j = 0; j < dv; ++j) {
      float& e = s[static_cast<size_t>(i * dv + j)];
      float p = k[i] * m[static_cast<size_t>(j)];
      e = e + p;
      float r = q[i] * e;
      o[j] = o[j] + r;
    }
}

TEST(Vec, GdnStepMatchesPlainUpdateBitwise) {
  for (auto [dk, dv] :
       {std::pair<int64_t, int64_t>{128, 128}, {24, 40}, {8, 33}, {5, 70}, {16, 7}}) {
    std::mt19937 rng(static_cast<unsigned>(dk * 131 + dv));
    std::uniform_real_distribution<float> d(-1.0f, 1.0f);
    std::vector<float> s(static_cast<size_t>(dk * dv)), want;
    for (auto& e : s) e = d(rng);
    want = s;
    std::vector<float> k(static_cast<size_t>(dk)), q(k.size()), v(static_cast<size_t>(dv));
    std::vector<float> o(v.size()), o_want(v.size()), m(v.size());
    for (int step = 0; step < 6; ++step) {
      for (auto& e : k) e = d(rng);
      for (auto& e : q) e = d(rng);
      for (auto& e : v) e = d(rng);
      const float eg = 0.5f + 0.5f * std::uniform_real_distribution<float>(0, 1)(rng);
      const float beta = std::uniform_real_distribution<float>(0, 1)(rng);
      vec::gdn_step(s.data(), dk, dv, eg, k.data(), q.data(), v.data(), beta, o.data(), m.data());
      plain_step(want, dk, dv, eg, k.data(), q.data(), v.data(), beta, o_want.data());
      ASSERT_EQ(o, o_want) << "dk=" << dk << " dv=" << dv << " step " << step;
      ASSERT_EQ(s, want) << "dk=" << dk << " dv=" << dv << " step " << step;
    }
  }
}

// A sequence of steps (gdn_steps, run column block by column block on AVX2, AVX-512 and NEON)
// against the plain update token after token, bitwise, on every level this CPU runs; strided q/k/v
// and o as the forward lays them out, head sizes with and without a partial 32-column block, and
// partial blocks of 1, 6, 7, 20 and 31 columns (NEON: a multiple of 4 or not, 1 to 8 vectors).
TEST(Vec, GdnStepsMatchPlainUpdateBitwiseOnEveryIsa) {
  for (Isa isa : supported_isas()) {
    for (auto [dk, dv, len] : {std::tuple<int64_t, int64_t, int64_t>{128, 128, 40},
                               {32, 96, 9},
                               {16, 70, 7},
                               {8, 20, 5},
                               {12, 33, 4},
                               {8, 7, 6},
                               {4, 63, 3},
                               {3, 1, 2},
                               // NEON 4-lane groups: 3, 4, 6 and 7 vectors (with the above,
                               // every block width 1 to 8 and a partial last vector)
                               {8, 11, 3},
                               {8, 16, 3},
                               {6, 23, 4},
                               {5, 27, 3},
                               // AVX-512: 64-column blocks, then 32 and columns; a head too
                               // large for them on a 48 KiB L1
                               {8, 200, 3},
                               {24, 160, 2},
                               {160, 100, 2},
                               {128, 128, 0}}) {
      std::mt19937 rng(static_cast<unsigned>(dk * 7 + dv + len));
      std::uniform_real_distribution<float> d(-1.0f, 1.0f), u01(0.0f, 1.0f);
      std::vector<float> s(static_cast<size_t>(dk * dv));
      for (auto& e : s) e = d(rng);
      std::vector<float> want = s;
      const int64_t qkv_stride = 2 * dk + dv + 3, o_stride = dv + 5;
      std::vector<float> qkv(static_cast<size_t>(std::max<int64_t>(len, 1) * qkv_stride));
      for (auto& e : qkv) e = d(rng);
      std::vector<float> eg(static_cast<size_t>(len)), beta(eg.size());
      for (auto& e : eg) e = 0.5f + 0.5f * u01(rng);
      for (auto& e : beta) e = u01(rng);
      std::vector<float> o(static_cast<size_t>(std::max<int64_t>(len, 1) * o_stride), 7.0f);
      std::vector<float> o_want = o;
      const float* q = qkv.data();
      const float* k = q + dk;
      const float* v = k + dk;
      vec::gdn_steps_isa(isa, s.data(), dk, dv, len,
                         {q, k, v, qkv_stride, eg.data(), beta.data(), o.data(), o_stride});
      for (int64_t n = 0; n < len; ++n)
        plain_step(want, dk, dv, eg[static_cast<size_t>(n)], k + n * qkv_stride, q + n * qkv_stride,
                   v + n * qkv_stride, beta[static_cast<size_t>(n)], o_want.data() + n * o_stride);
      ASSERT_EQ(o, o_want) << isa_name(isa) << " dk=" << dk << " dv=" << dv << " len=" << len;
      ASSERT_EQ(s, want) << isa_name(isa) << " dk=" << dk << " dv=" << dv << " len=" << len;
    }
  }
}

// dot as vec.h states it: 16 lane sums (lane l takes i = l, l+16, ...; product rounded, then
// added), then the tree (l, l+8), (l, l+4), (l, l+2), (0, 1).
float plain_dot(const float* a, const float* b, int64_t n) {
  float acc[16] = {};
  for (int64_t i = 0; i < n; ++i) {
    float p = a[i] * b[i];
    acc[i % 16] = acc[i % 16] + p;
  }
  for (int w = 8; w >= 1; w /= 2)
    for (int l = 0; l < w; ++l) acc[l] = acc[l] + acc[l + w];
  return acc[0];
}

// dot_fused as vec.h states it: dot's lanes and tree, each step one fused multiply-add.
float plain_dot_fused(const float* a, const float* b, int64_t n) {
  float acc[16] = {};
  for (int64_t i = 0; i < n; ++i) acc[i % 16] = std::fma(a[i], b[i], acc[i % 16]);
  for (int w = 8; w >= 1; w /= 2)
    for (int l = 0; l < w; ++l) acc[l] = acc[l] + acc[l + w];
  return acc[0];
}

// dot_rows is dot_fused row by row, bitwise, on every level this CPU runs (AVX2 four rows at a
// time, AVX-512 eight; lengths that are not a multiple of 16 and row counts that are not of 4 or
// 8 included); dot and dot_fused are their plain definitions.
TEST(Vec, DotRowsEqualsDotBitwiseOnEveryIsa) {
  std::mt19937 rng(21);
  std::uniform_real_distribution<float> d(-1.0f, 1.0f);
  for (Isa isa : supported_isas()) {
    for (auto [rows, n, ld] : {std::tuple<int64_t, int64_t, int64_t>{9, 256, 1024},
                               {19, 64, 64},
                               {4, 128, 128},
                               {3, 32, 40},
                               {7, 70, 80},
                               {0, 16, 16}}) {
      for (int trial = 0; trial < 16; ++trial) {  // a rounding difference shows in a few draws
        std::vector<float> a(static_cast<size_t>(n)),
            x(static_cast<size_t>(std::max<int64_t>(rows, 1) * ld));
        for (auto& e : a) e = d(rng);
        for (auto& e : x) e = d(rng);
        std::vector<float> got(static_cast<size_t>(rows)), want(got.size());
        vec::dot_rows_isa(isa, a.data(), x.data(), ld, rows, n, got.data());
        for (int64_t r = 0; r < rows; ++r)
          want[static_cast<size_t>(r)] = plain_dot_fused(a.data(), x.data() + r * ld, n);
        ASSERT_EQ(got, want) << isa_name(isa) << " rows=" << rows << " n=" << n;
        for (int64_t r = 0; r < rows; ++r) {
          ASSERT_EQ(vec::dot_fused(a.data(), x.data() + r * ld, n), want[static_cast<size_t>(r)]);
          ASSERT_EQ(vec::dot(a.data(), x.data() + r * ld, n),
                    plain_dot(a.data(), x.data() + r * ld, n));
        }
      }
    }
  }
}

// dot_block is one dot_fused per (vector, row) pair, bitwise, on every level this CPU runs (AVX2 in
// tiles of 2 vectors x 4 rows, AVX-512 4 x 4 with the 16 trees together): counts that are not
// multiples of the tiles (and a whole 128-key block), lengths that are not of 16,
// strides wider than the length and empty blocks included.
TEST(Vec, DotBlockEqualsDotBitwiseOnEveryIsa) {
  std::mt19937 rng(33);
  std::uniform_real_distribution<float> d(-1.0f, 1.0f);
  struct Shape {
    int64_t na, nx, n, lda, ldx, ldo;
  };
  for (Isa isa : supported_isas()) {
    for (Shape sh :
         {Shape{8, 12, 256, 256, 512, 40}, Shape{5, 7, 256, 300, 256, 9},
          Shape{3, 4, 32, 32, 48, 4}, Shape{4, 9, 70, 80, 70, 11}, Shape{1, 1, 16, 16, 16, 1},
          Shape{0, 5, 16, 16, 16, 5}, Shape{6, 0, 16, 16, 16, 1}, Shape{4, 128, 256, 256, 256, 130},
          Shape{3, 13, 32, 32, 40, 13}, Shape{2, 8, 16, 16, 16, 8}, Shape{2, 6, 48, 48, 48, 6}}) {
      for (int trial = 0; trial < 8; ++trial) {
        std::vector<float> a(static_cast<size_t>(std::max<int64_t>(sh.na, 1) * sh.lda)),
            x(static_cast<size_t>(std::max<int64_t>(sh.nx, 1) * sh.ldx));
        for (auto& e : a) e = d(rng);
        for (auto& e : x) e = d(rng);
        const size_t outs = static_cast<size_t>(std::max<int64_t>(sh.na, 1) * sh.ldo);
        std::vector<float> got(outs, -7.0f), want(outs, -7.0f);  // untouched cells stay -7
        vec::dot_block_isa(isa, a.data(), sh.lda, sh.na, x.data(), sh.ldx, sh.nx, sh.n, got.data(),
                           sh.ldo);
        for (int64_t i = 0; i < sh.na; ++i)
          for (int64_t j = 0; j < sh.nx; ++j)
            want[static_cast<size_t>(i * sh.ldo + j)] =
                plain_dot_fused(a.data() + i * sh.lda, x.data() + j * sh.ldx, sh.n);
        ASSERT_EQ(got, want) << isa_name(isa) << " na=" << sh.na << " nx=" << sh.nx
                             << " n=" << sh.n;
      }
    }
  }
}

// axpy_block is the repeated fused axpy for each output (y_i = fma(p_i[r], x_r, y_i), r in
// order, per element), written out plainly, bitwise, on every level this CPU runs (AVX2 in
// tiles of 6, 4, 2 and 1 outputs x 16 columns, rows in chunks of 256; AVX-512 8, 4, 2 and 1
// outputs x 32 columns in chunks of 128 rows, then a last 16 columns).
TEST(Vec, AxpyBlockMatchesRepeatedUpdateBitwiseOnEveryIsa) {
  std::mt19937 rng(35);
  std::uniform_real_distribution<float> d(-1.0f, 1.0f);
  struct Shape {
    int64_t ny, rows, n, ldy, ldp, ldx;
  };
  for (Isa isa : supported_isas()) {
    for (Shape sh :
         {Shape{8, 128, 256, 256, 300, 512}, Shape{6, 37, 256, 260, 40, 256},
          Shape{3, 5, 40, 40, 5, 48}, Shape{5, 9, 70, 72, 9, 70}, Shape{4, 0, 32, 32, 1, 32},
          Shape{0, 3, 16, 16, 3, 16}, Shape{13, 20, 48, 50, 21, 64}, Shape{11, 7, 17, 17, 7, 17},
          Shape{7, 600, 32, 40, 600, 48}}) {
      std::vector<float> x(static_cast<size_t>(std::max<int64_t>(sh.rows, 1) * sh.ldx)),
          p(static_cast<size_t>(std::max<int64_t>(sh.ny, 1) * sh.ldp)),
          y(static_cast<size_t>(std::max<int64_t>(sh.ny, 1) * sh.ldy));
      for (auto& e : x) e = d(rng);
      for (auto& e : p) e = d(rng);
      for (auto& e : y) e = d(rng);
      std::vector<float> want = y;
      for (int64_t i = 0; i < sh.ny; ++i)
        for (int64_t r = 0; r < sh.rows; ++r)
          for (int64_t j = 0; j < sh.n; ++j) {
            float& w = want[static_cast<size_t>(i * sh.ldy + j)];
            w = std::fma(p[static_cast<size_t>(i * sh.ldp + r)],
                         x[static_cast<size_t>(r * sh.ldx + j)], w);
          }
      vec::axpy_block_isa(isa, y.data(), sh.ldy, sh.ny, p.data(), sh.ldp, x.data(), sh.ldx, sh.rows,
                          sh.n);
      ASSERT_EQ(y, want) << isa_name(isa) << " ny=" << sh.ny << " rows=" << sh.rows
                         << " n=" << sh.n;
    }
  }
}

// A level this CPU does not run (another architecture's, or one above this CPU's best) is
// refused by name, not run.
TEST(Vec, UnsupportedLevelsAreRefused) {
  Isa missing = Isa::kPortable;
  for (Isa isa : arch_isas())
    if (!isa_supported(isa)) missing = isa;
  if (missing == Isa::kPortable) GTEST_SKIP() << "this CPU runs every level";
  std::vector<float> a(16, 1.0f), x(16, 1.0f), out(1);
  try {
    vec::dot_rows_isa(missing, a.data(), x.data(), 16, 1, 16, out.data());
    FAIL() << "dot_rows_isa ran " << isa_name(missing);
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kUnsupported);
    EXPECT_NE(std::string(e.what()).find(isa_name(missing)), std::string::npos) << e.what();
  }
  std::vector<float> s(4, 0.0f), o(2), eg(1, 1.0f), beta(1, 0.5f), qkv(6, 1.0f);
  try {
    vec::gdn_steps_isa(
        missing, s.data(), 2, 2, 1,
        {qkv.data(), qkv.data() + 2, qkv.data() + 4, 6, eg.data(), beta.data(), o.data(), 2});
    FAIL() << "gdn_steps_isa ran " << isa_name(missing);
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kUnsupported);
    EXPECT_NE(std::string(e.what()).find(isa_name(missing)), std::string::npos) << e.what();
  }
  EXPECT_THROW(vec::dot_block_isa(missing, a.data(), 16, 1, x.data(), 16, 1, 16, out.data(), 1),
               Error);
  EXPECT_THROW(vec::axpy_block_isa(missing, out.data(), 1, 1, a.data(), 1, x.data(), 16, 1, 1),
               Error);
}

// axpy_rows is the repeated fused axpy: y = fma(a_0, x_0, y), then fma(a_1, x_1, y), ... (per
// element, in row order), written out plainly here.
TEST(Vec, AxpyRowsMatchesRepeatedUpdateBitwise) {
  std::mt19937 rng(9);
  std::uniform_real_distribution<float> d(-1.0f, 1.0f);
  for (auto [rows, n, ld] : {std::tuple<int64_t, int64_t, int64_t>{1, 256, 256},
                             {37, 256, 1024},
                             {5, 70, 80},
                             {0, 64, 64},
                             {9, 7, 7}}) {
    std::vector<float> x(static_cast<size_t>(std::max<int64_t>(rows, 1) * ld)),
        a(static_cast<size_t>(rows + 1));
    for (auto& e : x) e = d(rng);
    for (auto& e : a) e = d(rng);
    std::vector<float> y(static_cast<size_t>(n)), want;
    for (auto& e : y) e = d(rng);
    want = y;
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t j = 0; j < n; ++j) {
        want[static_cast<size_t>(j)] =
            std::fma(a[static_cast<size_t>(r)], x[static_cast<size_t>(r * ld + j)],
                     want[static_cast<size_t>(j)]);
      }
    vec::axpy_rows(y.data(), a.data(), x.data(), ld, rows, n);
    ASSERT_EQ(y, want) << "rows=" << rows << " n=" << n;
  }
}

// The array activations (vectorized where the compiler can: AVX-512 / AVX2 clones on x86-64)
// against the scalar ones, bitwise, over a dense range and the special values.
TEST(Vec, ActivationsOverArraysMatchScalarBitwise) {
  std::vector<float> x;
  for (float v = -120.0f; v < 120.0f; v += 0.0137f) x.push_back(v);
  for (float v : {0.0f, -0.0f, 1e-30f, -1e-30f, 88.72283f, 88.7229f, -103.97f, -104.5f,
                  std::numeric_limits<float>::infinity(), -std::numeric_limits<float>::infinity(),
                  std::numeric_limits<float>::quiet_NaN(), std::numeric_limits<float>::max()})
    x.push_back(v);
  const int64_t n = static_cast<int64_t>(x.size());
  std::vector<float> u(x.rbegin(), x.rend());
  auto same = [](float a, float b) {
    return std::bit_cast<uint32_t>(a) == std::bit_cast<uint32_t>(b);
  };
  std::vector<float> y = x;
  vec::exp_shifted(y.data(), 0.5f, n);
  for (int64_t i = 0; i < n; ++i) ASSERT_TRUE(same(y[i], fixed_expf(x[i] - 0.5f))) << x[i];
  y = x;
  vec::silu(y.data(), n);
  for (int64_t i = 0; i < n; ++i) ASSERT_TRUE(same(y[i], vec::silu(x[i]))) << x[i];
  y = x;
  vec::silu_mul(y.data(), u.data(), n);
  for (int64_t i = 0; i < n; ++i) ASSERT_TRUE(same(y[i], vec::silu(x[i]) * u[i])) << x[i];
  y = x;
  vec::mul_sigmoid(y.data(), u.data(), n);
  for (int64_t i = 0; i < n; ++i) ASSERT_TRUE(same(y[i], x[i] * vec::sigmoid(u[i]))) << x[i];
  y = x;
  vec::divide(y.data(), 0.7f, n);
  for (int64_t i = 0; i < n; ++i) ASSERT_TRUE(same(y[i], x[i] / 0.7f)) << x[i];
  y = x;
  vec::scale_mul_silu(y.data(), 0.3f, u.data(), x.data(), n);
  for (int64_t i = 0; i < n; ++i)
    ASSERT_TRUE(same(y[i], x[i] * 0.3f * u[i] * vec::silu(x[i]))) << x[i];
}

// scale_max scales every element as y * a does and returns the largest, whatever the length
// (tails past a multiple of 16, the maximum in the tail, in any lane, or first or last), and
// -inf for no elements.
TEST(Vec, ScaleMaxScalesAndReturnsTheLargest) {
  std::mt19937 rng(41);
  std::uniform_real_distribution<float> d(-50.0f, 50.0f);
  auto same = [](float a, float b) {
    return std::bit_cast<uint32_t>(a) == std::bit_cast<uint32_t>(b);
  };
  EXPECT_EQ(vec::scale_max(nullptr, 0.5f, 0), -std::numeric_limits<float>::infinity());
  for (int64_t n : {1, 5, 15, 16, 17, 31, 32, 33, 100, 1000}) {
    for (int trial = 0; trial < 20; ++trial) {
      std::vector<float> x(static_cast<size_t>(n));
      for (auto& e : x) e = d(rng);
      if (trial % 4 == 1) x[static_cast<size_t>(trial) % x.size()] = 300.0f;  // a clear maximum
      if (trial % 4 == 2) x.back() = 300.0f;
      if (trial % 4 == 3) std::fill(x.begin(), x.end(), -std::numeric_limits<float>::infinity());
      std::vector<float> y = x;
      const float got = vec::scale_max(y.data(), 0.0625f * static_cast<float>(trial + 1), n);
      float want = -std::numeric_limits<float>::infinity();
      for (int64_t i = 0; i < n; ++i) {
        const float e = x[static_cast<size_t>(i)] * (0.0625f * static_cast<float>(trial + 1));
        ASSERT_TRUE(same(y[static_cast<size_t>(i)], e)) << n << " " << i;
        want = std::max(want, e);
      }
      ASSERT_TRUE(same(got, want)) << "n=" << n << " trial=" << trial;
    }
  }
}

}  // namespace
}  // namespace kev
