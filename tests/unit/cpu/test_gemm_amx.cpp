// The AMX int8 kernel (x86/gemm_amx.cpp, bodies/tile_amx_int8.inc):
// - the emulated tile operations (portable/amx_emu_ops.h) and the vector operations the body
//   adds (portable/avx512_emu_ops.h) against scalar references written here from the
//   instructions' documented semantics;
// - the emulated kernel against the portable kernel, bit for bit, on every x86-64 machine: row
//   counts around its steps of 16 and 32 rows, K and output tails, the activations' byte split at
//   its edges, q4 weights, thread splits;
// - the real kernel against the emulated one where this CPU has AMX (else GTEST_SKIP saying so);
// - the AMX-BF16 dot kernel: its emulation within the bf16 dot kernels' error bound of a float64
//   evaluation (precision_kernels.h), independent of the batch and the threads, and the real one
//   bit for bit equal to it where the CPU has AMX-BF16.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "cpu/drivers/precision_variants.h"
#include "cpu/portable/amx_emu_ops.h"
#include "cpu/portable/avx512_emu_ops.h"
#include "gemm_problem.h"
#include "kev/core/bf16.h"
#include "kev/cpu/gemm_int8.h"
#include "kev/cpu/isa.h"
#include "kev/cpu/precision_kernels.h"

namespace kev {
namespace amx_test {

using amx::EmuTileOps;
using avx512::EmuOps;
using gemm_test::Problem;

// A configuration of eight tiles of `rows` x `colsb`.
void configure(int rows, int colsb) {
  uint8_t cfg[64] = {};
  cfg[0] = 1;
  for (int t = 0; t < 8; ++t) {
    const auto c = static_cast<uint16_t>(colsb);
    std::memcpy(cfg + 16 + 2 * t, &c, 2);
    cfg[48 + t] = static_cast<uint8_t>(rows);
  }
  EmuTileOps::config(cfg);
}

// C[m][n] + sum over k, i of A[m][4k + i] * B[k][4n + i] in 64 bits, reduced modulo 2^32.
int32_t dot_ref(int32_t c, const uint8_t* a_row, const uint8_t (*b)[64], int n, int kdw,
                bool unsigned_a) {
  int64_t sum = c;
  for (int k = 0; k < kdw; ++k)
    for (int i = 0; i < 4; ++i) {
      const int64_t av =
          unsigned_a ? int64_t{a_row[4 * k + i]} : int64_t{static_cast<int8_t>(a_row[4 * k + i])};
      sum += av * int64_t{static_cast<int8_t>(b[k][4 * n + i])};
    }
  return static_cast<int32_t>(static_cast<uint32_t>(static_cast<uint64_t>(sum)));
}

TEST(AmxEmulation, TileProductsFollowTheSdm) {
  std::mt19937 rng(7);
  for (const auto& [rows, colsb] : {std::pair{16, 64}, std::pair{5, 20}}) {
    configure(rows, colsb);
    for (bool unsigned_a : {false, true}) {
      uint8_t a[16][64], b[16][64], c[16][64], out[16][64];
      for (auto* t : {&a, &b, &c})
        for (auto& row : *t)
          for (auto& v : row) v = static_cast<uint8_t>(rng());
      // Extremes that wrap the int32 sum: C = INT32_MAX with 16 products of -128 * -128.
      std::memset(a[0], 0x80, 64);
      std::memset(b, 0x80, sizeof b);
      std::memset(c[0], 0xff, 64);
      for (int n = 0; n < 16; ++n) c[0][4 * n + 3] = 0x7f;
      EmuTileOps::load<0>(a, 64);
      EmuTileOps::load<1>(b, 64);
      EmuTileOps::load<2>(c, 64);
      if (unsigned_a)
        EmuTileOps::dpbusd<2, 0, 1>();
      else
        EmuTileOps::dpbssd<2, 0, 1>();
      std::memset(out, 0xee, sizeof out);
      EmuTileOps::store<2>(out, 64);
      for (int m = 0; m < rows; ++m)
        for (int n = 0; n < colsb / 4; ++n) {
          int32_t c0, got;
          std::memcpy(&c0, c[m] + 4 * n, 4);
          std::memcpy(&got, out[m] + 4 * n, 4);
          ASSERT_EQ(got, dot_ref(c0, a[m], b, n, colsb / 4, unsigned_a))
              << "rows " << rows << " m " << m << " n " << n << " unsigned " << unsigned_a;
        }
      // A store writes rows x colsb bytes and nothing else.
      for (int m = 0; m < 16; ++m)
        for (int j = 0; j < 64; ++j)
          if (m >= rows || j >= colsb) {
            ASSERT_EQ(out[m][j], 0xee) << m << " " << j;
          }
    }
  }
  EmuTileOps::release();
}

TEST(AmxEmulation, LoadsWithStrideAndZeroes) {
  configure(16, 64);
  std::vector<uint8_t> src(16 * 100);
  for (size_t i = 0; i < src.size(); ++i) src[i] = static_cast<uint8_t>(i * 7 + 1);
  EmuTileOps::load<3>(src.data(), 100);
  uint8_t out[16][64];
  EmuTileOps::store<3>(out, 64);
  for (int r = 0; r < 16; ++r) ASSERT_EQ(std::memcmp(out[r], src.data() + r * 100, 64), 0) << r;
  EmuTileOps::zero<3>();
  EmuTileOps::store<3>(out, 64);
  for (auto& row : out)
    for (uint8_t v : row) ASSERT_EQ(v, 0);
  EmuTileOps::release();
}

TEST(AmxEmulation, VectorOpsOfTheBody) {
  uint8_t bytes[32];
  for (int i = 0; i < 32; ++i) bytes[i] = static_cast<uint8_t>(250 - 9 * i);
  const EmuOps::I w = EmuOps::widen_u8(bytes);
  const EmuOps::I s = EmuOps::shl8_words(w);
  for (int i = 0; i < 32; ++i) {
    const auto word = static_cast<uint16_t>(w.l[i / 2] >> (16 * (i % 2)));
    EXPECT_EQ(word, bytes[i]) << i;  // vpmovzxbw: zero-extended
    const auto shifted = static_cast<uint16_t>(s.l[i / 2] >> (16 * (i % 2)));
    EXPECT_EQ(shifted, static_cast<uint16_t>(bytes[i] * 256)) << i;  // vpsllw 8
  }
  EmuOps::I a{}, b{};
  for (int i = 0; i < 16; ++i) {
    a.l[i] = 0x01234567u * static_cast<uint32_t>(i + 1);
    b.l[i] = 0xfedcba98u + static_cast<uint32_t>(i);
  }
  const EmuOps::I sum = EmuOps::add_i(a, b), sh = EmuOps::shl8_dwords(a);
  for (int i = 0; i < 16; ++i) {
    EXPECT_EQ(sum.l[i], static_cast<uint32_t>((uint64_t{a.l[i]} + b.l[i]) % (uint64_t{1} << 32)));
    EXPECT_EQ(sh.l[i], static_cast<uint32_t>((uint64_t{a.l[i]} * 256) % (uint64_t{1} << 32)));
  }
  uint32_t stored[16];
  EmuOps::store_i(stored, b);
  EXPECT_EQ(std::memcmp(stored, b.l, 64), 0);
}

// ---- the kernel ----

std::optional<Int8Kernel> kernel(const char* name) {
  return find_int8_kernel(name);
}

std::vector<float> run(const Problem& p, const Int8Matrix& q, Int8Kernel k, size_t threads) {
  std::vector<float> y(static_cast<size_t>(p.m * p.n), NAN);
  gemm_int8_kernel(k, p.x.data(), p.m, p.k, q, y.data(), p.n, threads);
  return y;
}

bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

Problem first_rows(const Problem& p, int64_t m) {
  Problem out = p;
  out.m = m;
  out.x.resize(static_cast<size_t>(m * p.k));
  return out;
}

TEST(GemmAmxInt8, EmulatedEqualsPortableBitwise) {
  const std::optional<Int8Kernel> emu = kernel("amxint8-emulated");
  if (!emu) GTEST_SKIP() << "no AMX kernel in this " << arch_name() << " build";
  unsigned seed = 70;
  for (int64_t k : {32, 71, 256})
    for (int64_t n : {1, 40, 100}) {
      const Problem p = gemm_test::make_normal(70, k, n, seed++);
      const Int8Matrix q = quantize_int8(p.mat(), 1);
      for (int64_t m : {1, 15, 16, 17, 31, 32, 33, 64, 70}) {
        const Problem pm = first_rows(p, m);
        const auto want = run(pm, q, kPortableInt8Kernel, 1);
        for (size_t threads : {1, 3})
          ASSERT_TRUE(same_bits(run(pm, q, *emu, threads), want))
              << "m " << m << " k " << k << " n " << n << " threads " << threads;
      }
    }
}

// Activations whose int16 values sit at the edges of the byte split (x = 256 hi + lo): +-32767,
// -1 (hi -1, lo 255), +-256, 255, -255, 0; weights at +-127 and 0.
Problem split_edges() {
  const float levels[] = {
      1.0f, -1.0f, -1.0f / 32767, 256.0f / 32767, -256.0f / 32767, 255.0f / 32767, -255.0f / 32767,
      0.0f, 0.5f};
  Problem p{35, 96, 33, std::vector<float>(35 * 96), std::vector<uint16_t>(33 * 96)};
  for (int64_t i = 0; i < 35 * 96; ++i)
    // Every block holds a 1 or -1, so the scale is 1 / 32767 and the levels above are exact.
    p.x[static_cast<size_t>(i)] = i % 32 == 0 ? ((i / 32) % 2 ? -1.0f : 1.0f) : levels[(i * 7) % 9];
  for (int64_t i = 0; i < 33 * 96; ++i)
    p.w[static_cast<size_t>(i)] = f32_to_bf16((i % 96) < 32 ? 0.0f : ((i % 5) < 2 ? -0.5f : 0.5f));
  return p;
}

TEST(GemmAmxInt8, ByteSplitEdgesBitwise) {
  const std::optional<Int8Kernel> emu = kernel("amxint8-emulated");
  if (!emu) GTEST_SKIP() << "no AMX kernel in this " << arch_name() << " build";
  const Problem p = split_edges();
  const Int8Matrix q = quantize_int8(p.mat(), 1);
  EXPECT_TRUE(same_bits(run(p, q, *emu, 2), run(p, q, kPortableInt8Kernel, 1)));
}

// q4 weights go through the same tiles (gemm_int4_kernel widens them first).
TEST(GemmAmxInt8, Q4WeightsBitwise) {
  const std::optional<Int8Kernel> emu = kernel("amxint8-emulated");
  if (!emu) GTEST_SKIP() << "no AMX kernel in this " << arch_name() << " build";
  const Problem p = gemm_test::make_normal(37, 100, 40, 91);
  const int64_t blocks = (p.k + 31) / 32;
  std::vector<uint8_t> q4(static_cast<size_t>(p.n * blocks * 16));
  std::vector<uint16_t> s4(static_cast<size_t>(p.n * blocks));
  std::vector<float> row(static_cast<size_t>(p.k));
  for (int64_t r = 0; r < p.n; ++r) {
    for (int64_t k = 0; k < p.k; ++k)
      row[static_cast<size_t>(k)] = bf16_to_f32(p.w[static_cast<size_t>(r * p.k + k)]);
    ASSERT_TRUE(
        quantize_row_q4(row.data(), p.k, q4.data() + r * blocks * 16, s4.data() + r * blocks));
  }
  const Int4Matrix m = pack_q4_rows(q4.data(), s4.data(), p.n, p.k, 1);
  std::vector<float> want(static_cast<size_t>(p.m * p.n)), got(want.size(), NAN);
  gemm_int4_kernel(kPortableInt8Kernel, p.x.data(), p.m, p.k, m, want.data(), p.n, 1);
  gemm_int4_kernel(*emu, p.x.data(), p.m, p.k, m, got.data(), p.n, 2);
  EXPECT_TRUE(same_bits(got, want));
}

TEST(GemmAmxInt8, RealEqualsEmulatedBitwise) {
  const std::optional<Int8Kernel> real = kernel("amxint8");
  if (!real || !int8_kernel_supported(*real))
    GTEST_SKIP() << "this CPU (or OS) offers no AMX-INT8: only the emulated AMX kernel runs here";
  EXPECT_TRUE(probe_kernel(*real)) << kernel_probe_note();
  const Int8Kernel emu = *kernel("amxint8-emulated");
  unsigned seed = 90;
  for (int64_t k : {32, 100, 2560})
    for (int64_t n : {16, 72, 100})
      for (int64_t m : {1, 13, 32, 45}) {
        const Problem p = gemm_test::make_normal(m, k, n, seed++);
        const Int8Matrix q = quantize_int8(p.mat(), 1);
        const auto want = run(p, q, emu, 1);
        for (size_t threads : {1, 2})
          EXPECT_TRUE(same_bits(run(p, q, *real, threads), want))
              << "m " << m << " k " << k << " n " << n << " threads " << threads;
      }
  const Problem edges = split_edges();
  const Int8Matrix q = quantize_int8(edges.mat(), 1);
  EXPECT_TRUE(same_bits(run(edges, q, *real, 2), run(edges, q, kPortableInt8Kernel, 1)));
}

TEST(GemmAmxInt8, ProbePassesOnTheEmulatedKernel) {
  const std::optional<Int8Kernel> emu = kernel("amxint8-emulated");
  if (!emu) GTEST_SKIP() << "no AMX kernel in this " << arch_name() << " build";
  EXPECT_TRUE(probe_kernel(*emu)) << kernel_probe_note();
}

// ---- bf16 ----

float bf16_value(uint16_t h) {
  return bf16_to_f32(h);
}

// TDPBF16PS for one output, written from its documented steps: even and odd FMA chains from 0
// (denormal inputs and results flushed), then c + (even + odd).
float dpbf16_ref(float c, const uint16_t* a, const uint16_t* b, int pairs) {
  auto flush = [](double v) {
    const float f = static_cast<float>(v);  // the exact value rounded once (fits in double)
    return std::fabs(f) < std::ldexp(1.0f, -126) ? std::copysign(0.0f, f) : f;
  };
  float even = 0.0f, odd = 0.0f;
  for (int k = 0; k < pairs; ++k) {
    even = flush(static_cast<double>(bf16_value(a[2 * k])) * bf16_value(b[2 * k]) + even);
    odd = flush(static_cast<double>(bf16_value(a[2 * k + 1])) * bf16_value(b[2 * k + 1]) + odd);
  }
  return flush(static_cast<double>(c) + flush(static_cast<double>(even) + odd));
}

TEST(AmxEmulation, Bf16TileProductFollowsItsOrder) {
  configure(16, 64);
  std::mt19937 rng(11);
  std::uniform_int_distribution<int> e(-6, 6), mant(0, 127), sign(0, 1);
  auto random_bf16 = [&] {
    return static_cast<uint16_t>(sign(rng) << 15 | (e(rng) + 127) << 7 | mant(rng));
  };
  uint16_t a[16][32], b[16][32];
  float c[16][16], out[16][16];
  for (int trial = 0; trial < 20; ++trial) {
    for (auto& row : a)
      for (auto& v : row) v = random_bf16();
    for (auto& row : b)
      for (auto& v : row) v = random_bf16();
    for (auto& row : c)
      for (auto& v : row) v = bf16_value(random_bf16());
    EmuTileOps::load<0>(a, 64);
    EmuTileOps::load<1>(b, 64);
    EmuTileOps::load<2>(c, 64);
    EmuTileOps::dpbf16ps<2, 0, 1>();
    EmuTileOps::store<2>(out, 64);
    for (int m = 0; m < 16; ++m)
      for (int n = 0; n < 16; ++n) {
        uint16_t col[32];
        for (int k = 0; k < 16; ++k) {
          col[2 * k] = b[k][2 * n];
          col[2 * k + 1] = b[k][2 * n + 1];
        }
        const float want = dpbf16_ref(c[m][n], a[m], col, 16);
        ASSERT_EQ(std::memcmp(&out[m][n], &want, 4), 0) << trial << " " << m << " " << n;
      }
  }
  // The order shows: c = 1, even = 2^-24 (one product), odd = 2^-24: c + (even + odd) = 1 +
  // 2^-23 exactly; a running sum from c would lose both halves to rounding (1 + 2^-24 = 1).
  uint16_t a1[16][32] = {}, b1[16][32] = {};
  float c1[16][16] = {};
  a1[0][0] = a1[0][1] = 0x3f80;  // 1, 1
  b1[0][0] = b1[0][1] = 0x3380;  // 2^-24
  c1[0][0] = 1.0f;
  EmuTileOps::load<0>(a1, 64);
  EmuTileOps::load<1>(b1, 64);
  EmuTileOps::load<2>(c1, 64);
  EmuTileOps::dpbf16ps<2, 0, 1>();
  EmuTileOps::store<2>(out, 64);
  EXPECT_EQ(out[0][0], 1.0f + std::ldexp(1.0f, -23));
  EmuTileOps::release();
}

std::vector<float> run_bf16(const Problem& p, const Bf16PairMatrix& w, Bf16Kernel k,
                            size_t threads) {
  std::vector<float> y(static_cast<size_t>(p.m * p.n), NAN);
  gemm_bf16_pairs(k, p.x.data(), p.m, p.k, w, y.data(), p.n, threads);
  return y;
}

// |y - y64| <= K * 2^-24 * sum |x_k w_k| (precision_kernels.h's bound for the bf16 dot kernels),
// y64 the float64 sum of the same BF16 operands.
void expect_bf16_bound(const Problem& p, const std::vector<float>& y, const char* what) {
  for (int64_t m = 0; m < p.m; ++m)
    for (int64_t n = 0; n < p.n; ++n) {
      double sum = 0.0, mag = 0.0;
      for (int64_t k = 0; k < p.k; ++k) {
        const double t =
            static_cast<double>(bf16_value(f32_to_bf16(p.x[static_cast<size_t>(m * p.k + k)]))) *
            bf16_value(p.w[static_cast<size_t>(n * p.k + k)]);
        sum += t;
        mag += std::fabs(t);
      }
      ASSERT_LE(std::fabs(y[static_cast<size_t>(m * p.n + n)] - sum),
                static_cast<double>(p.k) * std::ldexp(1.0, -24) * mag)
          << what << " m " << m << " n " << n << " k " << p.k;
    }
}

TEST(GemmAmxBf16, EmulatedWithinBoundAndBatchIndependent) {
  const std::optional<Bf16Kernel> emu = find_bf16_kernel("amxbf16-emulated");
  if (!emu) GTEST_SKIP() << "no AMX kernel in this " << arch_name() << " build";
  unsigned seed = 120;
  for (int64_t k : {1, 2, 31, 32, 33, 99, 256})
    for (int64_t n : {1, 16, 40, 100}) {
      const Problem p = gemm_test::make_normal(45, k, n, seed++);
      const Bf16PairMatrix w = pack_bf16_pairs(p.mat(), 1);
      const auto y = run_bf16(p, w, *emu, 3);
      expect_bf16_bound(p, y, "amxbf16-emulated");
      // A row's outputs do not depend on the rows beside it or the thread split.
      for (int64_t m : {1, 16, 17, 33}) {
        const Problem pm = first_rows(p, m);
        const auto ym = run_bf16(pm, w, *emu, 1);
        ASSERT_EQ(std::memcmp(ym.data(), y.data(), ym.size() * sizeof(float)), 0)
            << "m " << m << " k " << k << " n " << n;
      }
    }
}

TEST(GemmAmxBf16, RealEqualsEmulatedBitwise) {
  const std::optional<Bf16Kernel> real = find_bf16_kernel("amxbf16");
  if (!real || !bf16_kernel_supported(*real))
    GTEST_SKIP() << "this CPU (or OS) offers no AMX-BF16: only the emulated kernel runs here";
  const std::optional<Isa> avx512 = parse_isa("avx512");
  if (dispatch_isa("KEV_GEMM_ISA") == avx512) {
    EXPECT_EQ(best_bf16_kernel(), *real) << "probe: " << kernel_probe_note();
  }
  const Bf16Kernel emu = *find_bf16_kernel("amxbf16-emulated");
  unsigned seed = 140;
  for (int64_t k : {2, 33, 99, 2560})
    for (int64_t n : {16, 72, 100})
      for (int64_t m : {1, 13, 32, 45}) {
        const Problem p = gemm_test::make_normal(m, k, n, seed++);
        const Bf16PairMatrix w = pack_bf16_pairs(p.mat(), 1);
        const auto y = run_bf16(p, w, *real, 2);
        expect_bf16_bound(p, y, "amxbf16");
        EXPECT_TRUE(same_bits(y, run_bf16(p, w, emu, 1))) << "m " << m << " k " << k << " n " << n;
      }
}

// Into a wider output (a projection's reduced rows are a column range of y): every output of the
// range within the float64 bound and with the same bits as into its own array (where a tile is
// stored straight into y and where it goes through the kernel's buffer), nothing outside it
// touched.
TEST(GemmAmxBf16, WritesOnlyItsColumnsOfAWiderOutput) {
  std::vector<Bf16Kernel> kernels;
  for (const char* name : {"amxbf16-emulated", "amxbf16"})
    if (const std::optional<Bf16Kernel> k = find_bf16_kernel(name); k && bf16_kernel_supported(*k))
      kernels.push_back(*k);
  if (kernels.empty()) GTEST_SKIP() << "no AMX kernel in this " << arch_name() << " build";
  unsigned seed = 170;
  for (const Bf16Kernel k : kernels)
    for (int64_t n : {16, 40, 64})
      for (int64_t m : {13, 32, 45, 64}) {
        const Problem p = gemm_test::make_normal(m, 99, n, seed++);
        const Bf16PairMatrix w = pack_bf16_pairs(p.mat(), 1);
        const std::vector<float> own = run_bf16(p, w, k, 2);
        expect_bf16_bound(p, own, bf16_kernel_name(k));
        const int64_t left = 8, ldy = n + 24;
        std::vector<float> wide(static_cast<size_t>(m * ldy), -7.0f);
        gemm_bf16_pairs(k, p.x.data(), p.m, p.k, w, wide.data() + left, ldy, 2);
        for (int64_t r = 0; r < m; ++r)
          for (int64_t c = 0; c < ldy; ++c) {
            const float got = wide[static_cast<size_t>(r * ldy + c)];
            const bool inside = c >= left && c < left + n;
            const float want = inside ? own[static_cast<size_t>(r * n + c - left)] : -7.0f;
            ASSERT_EQ(std::memcmp(&got, &want, 4), 0)
                << bf16_kernel_name(k) << " m " << m << " n " << n << " row " << r << " col " << c;
          }
      }
}

}  // namespace amx_test
}  // namespace kev
