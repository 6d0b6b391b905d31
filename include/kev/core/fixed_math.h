// Transcendental functions with the same bits on every architecture and compiler.
// Why: libm differs between platforms in the last bits (glibc's expf, log1pf, sin, cos, pow
// on aarch64 are not x86-64's; x86-64 glibc even picks FMA variants at run time), and those
// bits reach the model's hidden states and probabilities. Everything else in the model is
// IEEE-754 in a fixed order, so with these the scored numbers are byte-identical across
// architectures. Each function is a fixed sequence of IEEE +, -, *, / on double, integer and
// bit operations: no libm call, no FMA (the build has -ffp-contract=off), round to nearest.
// Guarantees (measured by tests/unit/core/fixed_math_test.cpp against long double / Python):
//   fixed_expf, fixed_log1pf (float): evaluated in double (error < 2^-50 relative) and rounded
//     once to float, so correctly rounded except where the exact value lies within 2^-50 of a
//     rounding boundary (7 million swept inputs: max 0.4999995 ulp, every one correctly rounded).
//     Subnormal results, overflow to +inf, underflow to +0, NaN, +-inf, -0 as C99 Annex F.
//   fixed_exp (double): <= 1.5 ulp (measured 1.25; subnormal results are rounded twice);
//   fixed_log (double): <= 1 ulp (measured 0.82).
//   fixed_sin, fixed_cos (double): <= 1 ulp (measured 0.78) for |x| <= kFixedTrigMaxArg (2^20);
//     the reduction by pi/2 carries pi/2 to 2^-157 in four parts, so the arguments nearest a
//     multiple of pi/2 (tested) lose no accuracy. Beyond 2^20 (and for +-inf) they return
//     NaN: callers check the range (the RoPE tables refuse positions whose angles exceed it).
//   fixed_pow(x, y) = exp(y * log(x)) for x > 0 (NaN for x <= 0): relative error
//     about 1.5 ulp + |y * log(x)| ulp (log(x)'s rounding scaled by y; the RoPE frequencies
//     theta^(-2i/rot), theta <= 1e7: <= 16 ulp, measured 12.7, far below their float use).
#pragma once
#include <array>
#include <bit>
#include <cstddef>
#include <cstdint>
#include <limits>

namespace kev {

inline constexpr double kFixedTrigMaxArg = 0x1p20;

namespace fixed_math_detail {

// 2^(j/64), j = 0..63, each rounded to nearest double (derived with 80-digit decimals).
inline constexpr double kExp2Table[64] = {
    0x1.0000000000000p+0, 0x1.02c9a3e778061p+0, 0x1.059b0d3158574p+0, 0x1.0874518759bc8p+0,
    0x1.0b5586cf9890fp+0, 0x1.0e3ec32d3d1a2p+0, 0x1.11301d0125b51p+0, 0x1.1429aaea92de0p+0,
    0x1.172b83c7d517bp+0, 0x1.1a35beb6fcb75p+0, 0x1.1d4873168b9aap+0, 0x1.2063b88628cd6p+0,
    0x1.2387a6e756238p+0, 0x1.26b4565e27cddp+0, 0x1.29e9df51fdee1p+0, 0x1.2d285a6e4030bp+0,
    0x1.306fe0a31b715p+0, 0x1.33c08b26416ffp+0, 0x1.371a7373aa9cbp+0, 0x1.3a7db34e59ff7p+0,
    0x1.3dea64c123422p+0, 0x1.4160a21f72e2ap+0, 0x1.44e086061892dp+0, 0x1.486a2b5c13cd0p+0,
    0x1.4bfdad5362a27p+0, 0x1.4f9b2769d2ca7p+0, 0x1.5342b569d4f82p+0, 0x1.56f4736b527dap+0,
    0x1.5ab07dd485429p+0, 0x1.5e76f15ad2148p+0, 0x1.6247eb03a5585p+0, 0x1.6623882552225p+0,
    0x1.6a09e667f3bcdp+0, 0x1.6dfb23c651a2fp+0, 0x1.71f75e8ec5f74p+0, 0x1.75feb564267c9p+0,
    0x1.7a11473eb0187p+0, 0x1.7e2f336cf4e62p+0, 0x1.82589994cce13p+0, 0x1.868d99b4492edp+0,
    0x1.8ace5422aa0dbp+0, 0x1.8f1ae99157736p+0, 0x1.93737b0cdc5e5p+0, 0x1.97d829fde4e50p+0,
    0x1.9c49182a3f090p+0, 0x1.a0c667b5de565p+0, 0x1.a5503b23e255dp+0, 0x1.a9e6b5579fdbfp+0,
    0x1.ae89f995ad3adp+0, 0x1.b33a2b84f15fbp+0, 0x1.b7f76f2fb5e47p+0, 0x1.bcc1e904bc1d2p+0,
    0x1.c199bdd85529cp+0, 0x1.c67f12e57d14bp+0, 0x1.cb720dcef9069p+0, 0x1.d072d4a07897cp+0,
    0x1.d5818dcfba487p+0, 0x1.da9e603db3285p+0, 0x1.dfc97337b9b5fp+0, 0x1.e502ee78b3ff6p+0,
    0x1.ea4afa2a490dap+0, 0x1.efa1bee615a27p+0, 0x1.f50765b6e4540p+0, 0x1.fa7c1819e90d8p+0,
};
// The same as bits (an integer table: a vectorizing compiler gathers from it).
inline constexpr auto kExp2Bits = [] {
  std::array<uint64_t, 64> bits{};
  for (size_t j = 0; j < bits.size(); ++j) bits[j] = std::bit_cast<uint64_t>(kExp2Table[j]);
  return bits;
}();
// Adding then subtracting 1.5 * 2^52 rounds a double of magnitude < 2^51 to an integer.
inline constexpr double kRoundShifter = 0x1.8p52;
inline constexpr double kInvLn2x64 = 0x1.71547652b82fep+6;  // 64 / ln 2
inline constexpr double kLn2x64Hi = 0x1.62e42fee00000p-7;   // ln 2 / 64, top 32 bits
inline constexpr double kLn2x64Lo = 0x1.a39ef35793c76p-39;  // ln 2 / 64 - kLn2x64Hi
inline constexpr double kLn2Hi = 0x1.62e42fefa3800p-1;      // ln 2, top 42 bits
inline constexpr double kLn2Lo = 0x1.ef35793c76730p-45;     // ln 2 - kLn2Hi
inline constexpr double kSqrt2 = 0x1.6a09e667f3bcdp+0;
inline constexpr double kTwoOverPi = 0x1.45f306dc9c883p-1;
inline constexpr double kPio2Part1 = 0x1.921fb54400000p+0;    // pi/2, top 33 bits
inline constexpr double kPio2Part2 = 0x1.0b4611a600000p-34;   // the next 33 bits
inline constexpr double kPio2Part3 = 0x1.3198a2e000000p-69;   // the next 33 (29 non-zero)
inline constexpr double kPio2Part4 = 0x1.b839a252049c1p-104;  // the rest, rounded (to 2^-157)
inline constexpr double kInf = std::numeric_limits<double>::infinity();
inline constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

// Rounds x (|x| < 2^51) to the nearest integer, returned both as a double and an integer.
inline double round_to_integer(double x, int64_t& n) {
  const double shifted = x + kRoundShifter;
  n = std::bit_cast<int64_t>(shifted) - std::bit_cast<int64_t>(kRoundShifter);
  return shifted - kRoundShifter;
}

inline double pow2(int64_t e) {  // 2^e for -1022 <= e <= 1023
  return std::bit_cast<double>(static_cast<uint64_t>(e + 1023) << 52);
}

// exp(r) - 1 for |r| <= ln2/128: Taylor to degree 5 (the first omitted term < 2^-54 relative).
inline double expm1_poly(double r) {
  return r +
         r * r *
             (0x1.0000000000000p-1 +
              r * (0x1.5555555555555p-3 + r * (0x1.5555555555555p-5 + r * 0x1.1111111111111p-7)));
}

// exp(x) = 2^e * m with m in [0.99, 2.01): x = (64 e + j) ln2/64 + r, |r| <= ln2/128,
// m = 2^(j/64) (1 + expm1_poly(r)). Valid for |x| < 2^40.
inline double exp_mantissa(double x, int64_t& e) {
  int64_t n;
  const double kd = round_to_integer(x * kInvLn2x64, n);
  const double r = (x - kd * kLn2x64Hi) - kd * kLn2x64Lo;  // the first product is exact
  const double p = expm1_poly(r);
  const double t = kExp2Table[n & 63];
  e = n >> 6;  // floor division (arithmetic shift)
  return t + t * p;
}

// log(1 + f) for f in [sqrt(1/2) - 1, sqrt(2) - 1], plus `add` (a small correction folded in
// before the last rounding): with s = f / (2 + f), log(1 + f) = 2 atanh(s)
// = f - (f^2/2 - s (f^2/2 + R)), R = sum_{k>=1} 2 s^(2k) / (2k + 1) (|s| <= 0.1716: eleven
// terms leave an error below 2^-60).
inline double log1p_reduced(double f, double add) {
  const double hfsq = 0.5 * f * f;
  const double s = f / (2.0 + f);
  const double z = s * s;
  const double r =
      z * (0x1.5555555555555p-1 +
           z * (0x1.999999999999ap-2 +
                z * (0x1.2492492492492p-2 +
                     z * (0x1.c71c71c71c71cp-3 +
                          z * (0x1.745d1745d1746p-3 +
                               z * (0x1.3b13b13b13b14p-3 +
                                    z * (0x1.1111111111111p-3 +
                                         z * (0x1.e1e1e1e1e1e1ep-4 +
                                              z * (0x1.af286bca1af28p-4 +
                                                   z * (0x1.8618618618618p-4 +
                                                        z * 0x1.642c8590b2164p-4))))))))));
  return f - (hfsq - (s * (hfsq + r) + add));
}

// x = quadrant * pi/2 + (hi + lo), |hi + lo| <= pi/4 (about), for |x| <= kFixedTrigMaxArg.
struct ReducedAngle {
  double hi, lo;
  int64_t quadrant;
};

inline ReducedAngle reduce_by_pio2(double x) {
  if (x > -0x1.921fb54442d18p-1 && x < 0x1.921fb54442d18p-1) return {x, 0.0, 0};
  int64_t n;
  const double kd = round_to_integer(x * kTwoOverPi, n);
  const double t = x - kd * kPio2Part1;  // exact: |kd| < 2^20, 33-bit part, Sterbenz
  // t - kd * (Part2 + Part3) as the double-double r2 + err: each product is exact and each
  // difference a two-sum, so near a multiple of pi/2 (the result far below x) no bit is lost.
  const double w2 = kd * kPio2Part2;  // exact
  const double w3 = kd * kPio2Part3;  // exact
  const double r1 = t - w2;
  const double b1 = r1 - t;
  const double e1 = (t - (r1 - b1)) + (-w2 - b1);  // the rounding error of t - w2
  const double r2 = r1 - w3;
  const double b2 = r2 - r1;
  const double e2 = (r1 - (r2 - b2)) + (-w3 - b2);  // the rounding error of r1 - w3
  const double err = (e1 + e2) - kd * kPio2Part4;
  const double hi = r2 + err;
  return {hi, (r2 - hi) + err, n & 3};
}

// sin(hi + lo), |hi| <= pi/4 + tiny: Taylor to degree 17 (first omitted term < 2^-62 rel.).
inline double sin_reduced(double hi, double lo) {
  const double z = hi * hi;
  const double p =
      -0x1.5555555555555p-3 +
      z * (0x1.1111111111111p-7 +
           z * (-0x1.a01a01a01a01ap-13 +
                z * (0x1.71de3a556c734p-19 +
                     z * (-0x1.ae64567f544e4p-26 +
                          z * (0x1.6124613a86d09p-33 +
                               z * (-0x1.ae7f3e733b81fp-41 + z * 0x1.952c77030ad4ap-49))))));
  return hi + (z * hi * p + lo * (1.0 - 0.5 * z));
}

// cos(hi + lo), |hi| <= pi/4 + tiny: Taylor to degree 18.
inline double cos_reduced(double hi, double lo) {
  const double z = hi * hi;
  const double q =
      z * z *
      (0x1.5555555555555p-5 +
       z * (-0x1.6c16c16c16c17p-10 +
            z * (0x1.a01a01a01a01ap-16 +
                 z * (-0x1.27e4fb7789f5cp-22 +
                      z * (0x1.1eed8eff8d898p-29 +
                           z * (-0x1.93974a8c07c9dp-37 +
                                z * (0x1.ae7f3e733b81fp-45 + z * -0x1.6827863b97d97p-53)))))));
  const double hz = 0.5 * z;
  const double w = 1.0 - hz;
  return w + (((1.0 - w) - hz) + (q - hi * lo));
}

}  // namespace fixed_math_detail

// exp for float: the attention and pointer-head softmaxes, sigmoid, SiLU, softplus, GDN gates.
// Branch-free (the special inputs are selected with bit masks), so a loop over an array
// vectorizes (src/cpu/portable/vec.cpp); every lane does the same IEEE operations, the same bits.
inline float fixed_expf(float x) {
  namespace d = fixed_math_detail;
  const uint32_t bits = std::bit_cast<uint32_t>(x);
  const uint32_t nan = 0u - static_cast<uint32_t>((bits & 0x7fffffffu) > 0x7f800000u);
  // x > 0x1.62e42ep+6 (exp > FLT_MAX), +inf included; x < -104 (exp < 2^-150), -inf included.
  const uint32_t over = 0u - static_cast<uint32_t>(static_cast<int32_t>(bits) > 0x42b17217);
  const uint32_t under = 0u - static_cast<uint32_t>(bits > 0xc2d00000u);
  const uint32_t special = nan | over | under;
  const double xd = static_cast<double>(std::bit_cast<float>(bits & ~special));  // 0 if special
  const double shifted = xd * d::kInvLn2x64 + d::kRoundShifter;
  const int32_t n = static_cast<int32_t>(std::bit_cast<uint64_t>(shifted));  // round(x 64/ln2)
  const double kd = shifted - d::kRoundShifter;
  const double r = (xd - kd * d::kLn2x64Hi) - kd * d::kLn2x64Lo;  // the first product is exact
  // 2^(n/64) = 2^(n >> 6) 2^((n & 63)/64): the exponent added to the table entry's bits.
  const double t = std::bit_cast<double>(
      d::kExp2Bits[n & 63] + (static_cast<uint64_t>(static_cast<int64_t>(n >> 6)) << 52));
  const uint32_t y = std::bit_cast<uint32_t>(static_cast<float>(t + t * d::expm1_poly(r)));
  const uint32_t special_value = (nan & (bits | 0x00400000u)) | (~nan & over & 0x7f800000u);
  return std::bit_cast<float>((special & special_value) | (~special & y));
}

inline double fixed_exp(double x) {
  namespace d = fixed_math_detail;
  if (x != x) return x + x;
  if (x > 0x1.62e42fefa39efp+9) return d::kInf;  // exp > DBL_MAX
  if (x < -745.2) return 0.0;                    // exp < 2^-1075: rounds to +0
  int64_t e;
  const double m = d::exp_mantissa(x, e);
  if (e > 1000) return m * d::pow2(e - 100) * 0x1p100;
  if (e < -1000) return m * d::pow2(e + 100) * 0x1p-100;  // subnormal: the last product rounds
  return m * d::pow2(e);
}

inline double fixed_log(double x) {
  namespace d = fixed_math_detail;
  if (x != x) return x + x;
  if (x < 0.0) return d::kNaN;
  if (x == 0.0) return -d::kInf;
  if (x == d::kInf) return x;
  int64_t e = 0;
  if (x < 0x1p-1022) {  // subnormal: scale into the normal range
    x *= 0x1p54;
    e = -54;
  }
  const uint64_t bits = std::bit_cast<uint64_t>(x);
  e += static_cast<int64_t>(bits >> 52) - 1023;
  double m = std::bit_cast<double>((bits & 0x000fffffffffffffull) | 0x3ff0000000000000ull);
  if (m > d::kSqrt2) {  // m in [sqrt(1/2), sqrt(2)]
    m *= 0.5;
    e += 1;
  }
  const double ed = static_cast<double>(e);
  return ed * d::kLn2Hi + d::log1p_reduced(m - 1.0, ed * d::kLn2Lo);  // ed * kLn2Hi exact
}

// log(1 + x) for float: softplus.
inline float fixed_log1pf(float x) {
  namespace d = fixed_math_detail;
  if (x != x) return x + x;
  if (x <= -1.0f)
    return x == -1.0f ? -std::numeric_limits<float>::infinity()
                      : std::numeric_limits<float>::quiet_NaN();
  if (x == std::numeric_limits<float>::infinity()) return x;
  const double xd = static_cast<double>(x);
  if (xd > 0x1.6a09e667f3bcdp-1 - 1.0 && xd < d::kSqrt2 - 1.0)
    return static_cast<float>(d::log1p_reduced(xd, 0.0));
  // Here |x| > 0.29, so x's last bit is >= 2^-25 and 1 + x is exact in double for x < 2^53;
  // above that it rounds, changing the log by under 2^-53 absolute, far below a float ulp.
  return static_cast<float>(fixed_log(1.0 + xd));
}

inline double fixed_sin(double x) {
  namespace d = fixed_math_detail;
  if (!(x >= -kFixedTrigMaxArg && x <= kFixedTrigMaxArg)) return d::kNaN;  // NaN, inf, range
  if (x > -0x1p-27 && x < 0x1p-27) return x;  // sin x rounds to x (keeps -0)
  const auto a = d::reduce_by_pio2(x);
  switch (a.quadrant) {
    case 0:
      return d::sin_reduced(a.hi, a.lo);
    case 1:
      return d::cos_reduced(a.hi, a.lo);
    case 2:
      return -d::sin_reduced(a.hi, a.lo);
    default:
      return -d::cos_reduced(a.hi, a.lo);
  }
}

inline double fixed_cos(double x) {
  namespace d = fixed_math_detail;
  if (!(x >= -kFixedTrigMaxArg && x <= kFixedTrigMaxArg)) return d::kNaN;
  if (x > -0x1p-27 && x < 0x1p-27) return 1.0;
  const auto a = d::reduce_by_pio2(x);
  switch (a.quadrant) {
    case 0:
      return d::cos_reduced(a.hi, a.lo);
    case 1:
      return -d::sin_reduced(a.hi, a.lo);
    case 2:
      return -d::cos_reduced(a.hi, a.lo);
    default:
      return d::sin_reduced(a.hi, a.lo);
  }
}

// x^y for x > 0 (NaN otherwise): the RoPE frequencies theta^(-2i/rot).
inline double fixed_pow(double x, double y) {
  if (!(x > 0.0)) return fixed_math_detail::kNaN;
  return fixed_exp(y * fixed_log(x));
}

}  // namespace kev
