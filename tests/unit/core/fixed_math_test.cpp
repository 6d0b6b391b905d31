// fixed_math.h: error in ulps over dense sweeps against long double libm (80-bit on x86-64,
// 128-bit on aarch64), the edge cases of C99 Annex F, and golden values computed
// independently (60-digit decimals, correctly rounded) so the expected bits do not come
// from any libm.
#include "kev/core/fixed_math.h"

#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <limits>

namespace kev {
namespace {

constexpr float kInfF = std::numeric_limits<float>::infinity();
constexpr double kInfD = std::numeric_limits<double>::infinity();

// |got - ref| in units of the last place of the float (double) binade that holds ref.
double ulps_f32(float got, long double ref) {
  const long double mag = std::fabs(ref);
  const int exponent = mag < 0x1p-126L ? -126 : std::ilogb(mag);
  return static_cast<double>(std::fabs(static_cast<long double>(got) - ref) /
                             std::ldexp(1.0L, exponent - 23));
}
double ulps_f64(double got, long double ref) {
  const long double mag = std::fabs(ref);
  const int exponent = mag < 0x1p-1022L ? -1022 : std::ilogb(mag);
  return static_cast<double>(std::fabs(static_cast<long double>(got) - ref) /
                             std::ldexp(1.0L, exponent - 52));
}

template <typename Fn>
void for_float_bits(float lo, float hi, uint32_t steps, Fn fn) {
  // Every float in [lo, hi] is visited in order of its bits; a prime stride spreads the
  // samples over every binade and mantissa pattern.
  auto key = [](float f) {  // monotone map from float to unsigned
    const uint32_t b = std::bit_cast<uint32_t>(f);
    return (b & 0x80000000u) ? ~b : b | 0x80000000u;
  };
  auto unkey = [](uint32_t k) {
    return std::bit_cast<float>((k & 0x80000000u) ? k & 0x7fffffffu : ~k);
  };
  const uint32_t a = key(lo), b = key(hi);
  const uint32_t stride = std::max<uint32_t>(1, (b - a) / steps) | 1u;
  for (uint32_t k = a; k <= b && k >= a; k += stride) fn(unkey(k));
  fn(hi);
}

TEST(FixedMath, ExpfSweepWithinHalfUlp) {
  double worst = 0.0;
  int64_t misrounded = 0, n = 0;
  for_float_bits(-104.0f, 88.7228317f, 3000000, [&](float x) {
    const long double ref = std::exp(static_cast<long double>(x));
    const float got = fixed_expf(x);
    worst = std::max(worst, ulps_f32(got, ref));
    misrounded += got != static_cast<float>(ref);
    ++n;
  });
  std::printf("fixed_expf: %lld inputs, max error %.9f ulp, %lld not correctly rounded\n",
              static_cast<long long>(n), worst, static_cast<long long>(misrounded));
  EXPECT_LE(worst, 0.5 + 1e-6);
  EXPECT_EQ(misrounded, 0);
}

TEST(FixedMath, Log1pfSweepWithinHalfUlp) {
  double worst = 0.0;
  int64_t misrounded = 0, n = 0;
  auto check = [&](float x) {
    const long double ref = std::log1p(static_cast<long double>(x));
    const float got = fixed_log1pf(x);
    worst = std::max(worst, ulps_f32(got, ref));
    misrounded += got != static_cast<float>(ref);
    ++n;
  };
  for_float_bits(-0.99999994f, std::numeric_limits<float>::max(), 3000000, check);
  for_float_bits(-0.3f, 0.42f, 1000000, check);  // the reduced range, densely
  std::printf("fixed_log1pf: %lld inputs, max error %.9f ulp, %lld not correctly rounded\n",
              static_cast<long long>(n), worst, static_cast<long long>(misrounded));
  EXPECT_LE(worst, 0.5 + 1e-6);
  EXPECT_EQ(misrounded, 0);
}

// Doubles spread over [lo, hi]: a fixed linear congruential walk (reproducible).
template <typename Fn>
void for_doubles(double lo, double hi, int n, Fn fn) {
  uint64_t state = 88172645463325252ull;
  for (int i = 0; i < n; ++i) {
    state = state * 6364136223846793005ull + 1442695040888963407ull;
    const double u = static_cast<double>(state >> 11) * 0x1p-53;
    fn(lo + (hi - lo) * u);
  }
}

TEST(FixedMath, DoubleFunctionsWithinOneUlp) {
  double exp_worst = 0, log_worst = 0, sin_worst = 0, cos_worst = 0, pow_worst = 0;
  for_doubles(-745.0, 709.7, 300000, [&](double x) {
    exp_worst = std::max(exp_worst, ulps_f64(fixed_exp(x), std::exp(static_cast<long double>(x))));
  });
  for_doubles(-20.0, 20.0, 300000, [&](double x) {
    exp_worst = std::max(exp_worst, ulps_f64(fixed_exp(x), std::exp(static_cast<long double>(x))));
  });
  for_doubles(-1070.0, 1023.9, 300000, [&](double e) {
    const double x = std::exp2(e);
    log_worst = std::max(log_worst, ulps_f64(fixed_log(x), std::log(static_cast<long double>(x))));
  });
  for_doubles(0.5, 2.0, 300000, [&](double x) {
    log_worst = std::max(log_worst, ulps_f64(fixed_log(x), std::log(static_cast<long double>(x))));
  });
  for (double bound : {4.0, 300.0, kFixedTrigMaxArg}) {
    for_doubles(-bound, bound, 200000, [&](double x) {
      const long double xl = x;
      sin_worst = std::max(sin_worst, ulps_f64(fixed_sin(x), std::sin(xl)));
      cos_worst = std::max(cos_worst, ulps_f64(fixed_cos(x), std::cos(xl)));
    });
  }
  // The RoPE frequencies: theta^(-2i/rot) for the thetas and rotary dims models use.
  for (double theta : {10000.0, 1000000.0, 10000000.0})
    for (int rot : {32, 64, 128, 256})
      for (int i = 0; i < rot / 2; ++i) {
        const double y = -2.0 * i / rot;
        const long double ref =
            std::pow(static_cast<long double>(theta), static_cast<long double>(y));
        pow_worst = std::max(pow_worst, ulps_f64(fixed_pow(theta, y), ref));
      }
  std::printf("max error (ulp): exp %.4f log %.4f sin %.4f cos %.4f pow(RoPE) %.4f\n", exp_worst,
              log_worst, sin_worst, cos_worst, pow_worst);
  EXPECT_LE(exp_worst, 1.5);  // table and final rounding (and twice in the subnormal range)
  EXPECT_LE(log_worst, 1.0);
  EXPECT_LE(sin_worst, 1.0);
  EXPECT_LE(cos_worst, 1.0);
  EXPECT_LE(pow_worst, 16.0);
}

TEST(FixedMath, EdgeCases) {
  const float nan_f = std::numeric_limits<float>::quiet_NaN();
  const double nan_d = std::numeric_limits<double>::quiet_NaN();
  EXPECT_TRUE(std::isnan(fixed_expf(nan_f)));
  EXPECT_EQ(fixed_expf(kInfF), kInfF);
  EXPECT_EQ(std::bit_cast<uint32_t>(fixed_expf(-kInfF)), 0u);  // +0
  EXPECT_EQ(fixed_expf(0.0f), 1.0f);
  EXPECT_EQ(fixed_expf(-0.0f), 1.0f);
  EXPECT_EQ(fixed_expf(0x1.62e42ep+6f), 0x1.ffff08p+127f);  // the largest finite result
  EXPECT_EQ(fixed_expf(0x1.62e430p+6f), kInfF);             // the smallest overflowing input
  EXPECT_EQ(fixed_expf(-103.9f), 0x1p-149f);                // subnormal results
  EXPECT_EQ(fixed_expf(-103.98f), 0.0f);
  EXPECT_EQ(fixed_expf(-1e30f), 0.0f);
  EXPECT_EQ(fixed_expf(1e30f), kInfF);

  EXPECT_TRUE(std::isnan(fixed_log1pf(nan_f)));
  EXPECT_TRUE(std::isnan(fixed_log1pf(-1.5f)));
  EXPECT_TRUE(std::isnan(fixed_log1pf(-kInfF)));
  EXPECT_EQ(fixed_log1pf(-1.0f), -kInfF);
  EXPECT_EQ(fixed_log1pf(kInfF), kInfF);
  EXPECT_EQ(std::bit_cast<uint32_t>(fixed_log1pf(-0.0f)), 0x80000000u);  // -0 stays -0
  EXPECT_EQ(std::bit_cast<uint32_t>(fixed_log1pf(0.0f)), 0u);
  EXPECT_EQ(fixed_log1pf(0x1p-149f), 0x1p-149f);
  EXPECT_EQ(fixed_log1pf(-0x1p-149f), -0x1p-149f);

  EXPECT_TRUE(std::isnan(fixed_exp(nan_d)));
  EXPECT_EQ(fixed_exp(kInfD), kInfD);
  EXPECT_EQ(fixed_exp(-kInfD), 0.0);
  EXPECT_EQ(fixed_exp(710.0), kInfD);
  EXPECT_EQ(fixed_exp(-746.0), 0.0);
  EXPECT_EQ(fixed_exp(-745.0), 0x1p-1074);
  EXPECT_TRUE(std::isnan(fixed_log(-1.0)));
  EXPECT_TRUE(std::isnan(fixed_log(nan_d)));
  EXPECT_EQ(fixed_log(0.0), -kInfD);
  EXPECT_EQ(fixed_log(-0.0), -kInfD);
  EXPECT_EQ(fixed_log(kInfD), kInfD);
  EXPECT_EQ(fixed_log(1.0), 0.0);
  EXPECT_EQ(fixed_log(0x1p-1074), -1074 * 0x1.62e42fefa39efp-1);

  EXPECT_EQ(std::bit_cast<uint64_t>(fixed_sin(-0.0)), 0x8000000000000000ull);
  EXPECT_EQ(fixed_sin(1e-20), 1e-20);
  EXPECT_EQ(fixed_cos(-0.0), 1.0);
  for (double bad : {nan_d, kInfD, -kInfD, std::nextafter(kFixedTrigMaxArg, kInfD), -1e300}) {
    EXPECT_TRUE(std::isnan(fixed_sin(bad))) << bad;
    EXPECT_TRUE(std::isnan(fixed_cos(bad))) << bad;
  }
  EXPECT_FALSE(std::isnan(fixed_sin(kFixedTrigMaxArg)));
  EXPECT_TRUE(std::isnan(fixed_pow(0.0, 2.0)));
  EXPECT_TRUE(std::isnan(fixed_pow(-2.0, 2.0)));
  EXPECT_EQ(fixed_pow(10000.0, 0.0), 1.0);
  EXPECT_EQ(fixed_pow(1.0, -0.5), 1.0);
}

// Correctly rounded values from 60-digit decimal arithmetic (Python decimal: exp and ln, sin
// and cos by Taylor series after reducing by a 70-digit pi): no libm involved.
struct GoldenF {
  float x, want;
};
struct GoldenD {
  double x, want;
};

TEST(FixedMath, GoldenFloatValuesExact) {
  const GoldenF expf_golden[] = {
      {-0x1.9ep+6f, 0x1p-149f},       {-0x1.5ep+6f, 0x1.b2caf0p-127f},
      {-0x1.48p+3f, 0x1.2899a8p-15f}, {-0x1.0624dep-10f, 0x1.ff7cfep-1f},
      {0x1p-1f, 0x1.a61298p+0f},      {0x1p+0f, 0x1.5bf0a8p+1f},
      {0x1.4p+4f, 0x1.ceb088p+28f},   {0x1.62p+6f, 0x1.99b988p+127f},
      {-0x1.62e430p-1f, 0x1p-1f},     {0x1.921fb6p+1f, 0x1.72404ap+4f},
  };
  for (const auto& g : expf_golden) EXPECT_EQ(fixed_expf(g.x), g.want) << g.x;
  const GoldenF log1pf_golden[] = {
      {-0x1.ff7ceep-1f, -0x1.ba18e0p+2f},
      {-0x1p-1f, -0x1.62e430p-1f},
      {-0x1.4f8b58p-17f, -0x1.4f8bc6p-17f},
      {0x1.ad7f2ap-24f, 0x1.ad7f28p-24f},
      {0x1p-2f, 0x1.c8ff7cp-3f},
      {0x1.a3d70ap-2f, 0x1.5fd5fap-2f},
      {0x1p+0f, 0x1.62e430p-1f},
      {0x1.ce8834p+28f, 0x1.3ffe9ap+4f},
      {0x1.2eec2ep+101f, 0x1.18b464p+6f},
      {0x1.ep+2f, 0x1.11edb0p+1f},
  };
  for (const auto& g : log1pf_golden) EXPECT_EQ(fixed_log1pf(g.x), g.want) << g.x;
}

TEST(FixedMath, GoldenDoubleValuesWithinOneUlp) {
  auto within = [](double got, double want) {
    return got == want || std::nextafter(got, want) == want;
  };
  const GoldenD exp_golden[] = {
      {-0x1.74p+9, 0x0.0000000000002p-1022},          {-0x1.5e4p+9, 0x1.4ff475c68ca02p-1011},
      {-0x1.01e3b843eaa73p+4, 0x1.ad7f29abcaf44p-24}, {-0x1p+0, 0x1.78b56362cef38p-2},
      {0x1.b7cdfd9d7bdbbp-34, 0x1.000000006df38p+0},  {0x1.6666666666666p-1, 0x1.01c2a61268987p+1},
      {0x1.2c4p+8, 0x1.1fda3eaeb3d0ep+433},           {0x1.62cp+9, 0x1.81e9b4b52d0c9p+1023},
  };
  for (const auto& g : exp_golden) EXPECT_TRUE(within(fixed_exp(g.x), g.want)) << g.x;
  const GoldenD log_golden[] = {
      {0x0.012688b70e62bp-1022, -0x1.64e69394d9508p+9},
      {0x1.56e1fc2f8f359p-997, -0x1.5963447f87fb5p+9},
      {0x1.3333333333333p-2, -0x1.34378fcbda721p+0},
      {0x1.ffffde7210be9p-1, -0x1.0c6f82d74d230p-20},
      {0x1.8p+0, 0x1.9f323ecbf984cp-2},
      {0x1.312dp+23, 0x1.01e3b843eaa73p+4},
      {0x1.7e43c8800759cp+996, 0x1.5963447f87fb5p+9},
  };
  for (const auto& g : log_golden) EXPECT_TRUE(within(fixed_log(g.x), g.want)) << g.x;
  struct GoldenTrig {
    double x, sin, cos;
  };
  const GoldenTrig trig_golden[] = {
      {0x1p-1, 0x1.eaee8744b05f0p-2, 0x1.c1528065b7d50p-1},
      {-0x1p+1, -0x1.d18f6ead1b446p-1, -0x1.aa22657537205p-2},
      {0x1.9p+6, -0x1.03425b78c4db8p-1, 0x1.b981dbf665fdfp-1},
      {0x1.ffff8p+17, 0x1.960a26db13c6ep-1, -0x1.37e403cff462dp-1},
      {0x1.7ff2224115d9ap+17, -0x1.f7b35bbdf1aa0p-1, -0x1.6f40d87cb28a6p-3},
      {0x1.e848p+19, -0x1.6664b2568d867p-2, 0x1.df9df9906d32cp-1},
      {0x1.fffffp+19, -0x1.4cb305757fa66p-3, 0x1.f932ec65b1d71p-1},
      {0x1.5fdbbe9bba775p+4, 0x1.ee2c2d963a10cp-51, -0x1p+0},  // 7 pi rounded: sin tiny
  };
  for (const auto& g : trig_golden) {
    EXPECT_TRUE(within(fixed_sin(g.x), g.sin)) << g.x;
    EXPECT_TRUE(within(fixed_cos(g.x), g.cos)) << g.x;
  }
  // The hardest arguments for the reduction by pi/2: the doubles below 2^20 nearest a multiple
  // k pi/2, where sin or cos is tiny and every bit of the reduced argument matters. Found by
  // an exhaustive search over k = 1 .. 2^20 / (pi/2) (integer arithmetic with pi to 300 bits),
  // keeping the smallest |x - k pi/2| / x, one per mantissa, plus 29 pi/2 and 409102 pi/2 =
  // 2 * 204551 pi/2 (the worst one, 1.7e-22 relative, one binade up). sin and cos of the exact
  // double x by mpmath at 400 bits, each written as hi + lo: hi the nearest double, lo the
  // nearest double to the rest. Asserted against the header's bound, <= 1 ulp of the exact value.
  struct HardTrig {
    double x, sin_hi, sin_lo, cos_hi, cos_lo;
  };
  const HardTrig hard_trig[] = {
      {0x1.6c6cbc45dc8dep+5, 0x1.0000000000000p+0, -0x1.04bfe27f01e31p-122, -0x1.6d61b58c99c43p-61,
       0x1.d8d2a16b7bd6ep-118},  // 45.553093477052 ~ 29 pi/2
      {0x1.39c6fd67805a7p+18, -0x1.0000000000000p+0, 0x1.46040ce74732ep-110, -0x1.988efe18ff83fp-55,
       -0x1.662d9427328d7p-109},  // 321307.9594422229 ~ 204551 pi/2
      {0x1.93c05c9ed3cbcp+18, 0x1.0000000000000p+0, -0x1.0ce36a6a861f7p-105, -0x1.065d73720c4f9p-52,
       0x1.025d05d5f260dp-108},  // 413441.44719405076 ~ 263205 pi/2
      {0x1.edb9bbd6273d1p+18, -0x1.0000000000000p+0, 0x1.43c6620c192f9p-103, 0x1.1fe663539c47dp-51,
       -0x1.a8d1a0cc25be3p-107},  // 505574.93494587863 ~ 321859 pi/2
      {0x1.23d98d86bd573p+19, 0x1.0000000000000p+0, -0x1.821a4f371ac2dp-102, -0x1.bc9e0cee3267dp-51,
       -0x1.4be2d054ab6c9p-105},  // 597708.4226977065 ~ 380513 pi/2
      {0x1.39c6fd67805a7p+19, 0x1.988efe18ff83fp-54, 0x1.662d9427328d7p-108, -0x1.0000000000000p+0,
       0x1.46040ce74732ep-108},  // 642615.9188844458 ~ 409102 pi/2
      {0x1.4fb46d48435dbp+19, -0x1.0000000000000p+0, 0x1.23efcfb5a8973p-101, -0x1.1160e63a39247p-50,
       0x1.ad48e550c3f86p-104},  // 687523.4150711851 ~ 437691 pi/2
      {0x1.a9adcc7f96cf0p+19, -0x1.0000000000000p+0, 0x1.a94e768e26e36p-104, -0x1.d2a4f27e8c119p-52,
       0x1.8d807761e351bp-106},  // 871790.3905748408 ~ 554999 pi/2
  };
  // |got - (hi + lo)| in ulps of the binade holding hi + lo (one below hi when hi is a power of
  // two and lo points toward zero); got - hi is exact (they are a few ulps apart).
  auto ulps_dd = [](double got, double hi, double lo) {
    int e = std::ilogb(hi);
    if (std::fabs(hi) == std::ldexp(1.0, e) && (lo < 0) != (hi < 0) && lo != 0) e -= 1;
    return std::fabs((got - hi) - lo) / std::ldexp(1.0, e - 52);
  };
  for (const auto& g : hard_trig) {
    EXPECT_LE(ulps_dd(fixed_sin(g.x), g.sin_hi, g.sin_lo), 1.0) << std::hexfloat << g.x;
    EXPECT_LE(ulps_dd(fixed_cos(g.x), g.cos_hi, g.cos_lo), 1.0) << std::hexfloat << g.x;
    EXPECT_LE(ulps_dd(fixed_sin(-g.x), -g.sin_hi, -g.sin_lo), 1.0) << std::hexfloat << -g.x;
    EXPECT_LE(ulps_dd(fixed_cos(-g.x), g.cos_hi, g.cos_lo), 1.0) << std::hexfloat << -g.x;
  }
  // RoPE frequencies of Qwen3.5 (theta 1e7, rotary dim 64): 1e7^(-2i/64).
  const GoldenD pow_golden[] = {
      {-0x1p-5, 0x1.3566562253c7ep-1},
      {-0x1.cp-3, 0x1.e222ec75094e2p-6},
      {-0x1.fp-1, 0x1.635e883bbc816p-23},
  };
  for (const auto& g : pow_golden) {
    const double got = fixed_pow(10000000.0, g.x);
    EXPECT_LE(std::fabs(got - g.want), 16 * (std::nextafter(g.want, 1.0) - g.want)) << g.x;
  }
}

}  // namespace
}  // namespace kev
