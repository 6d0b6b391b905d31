// The AVX-512 precision-mode kernels (gemm_avx512.h):
// - the emulated vector operations against scalar references written here from the
//   instructions' documented semantics;
// - the emulated int8 kernel against the portable kernel (bitwise), on every machine;
// - the real kernels against the emulated ones where this CPU has the instructions (else
//   GTEST_SKIP saying so; a kernel that its start-up probe turned off is a loud skip).
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "kev/core/bf16.h"
#include "kev/model/gemm_avx512.h"
#include "model/avx512_ops.h"

namespace kev {
namespace {

using avx512::EmuOps;

uint32_t pack16(int16_t lo, int16_t hi) {
  return static_cast<uint32_t>(static_cast<uint16_t>(lo)) |
         (static_cast<uint32_t>(static_cast<uint16_t>(hi)) << 16);
}

// ---- the emulated instructions ----

// vpdpwssd: the exact sum in 64 bits, then reduced modulo 2^32 into int32 (no saturation).
int32_t dpwssd_ref(int32_t acc, int16_t a0, int16_t a1, int16_t b0, int16_t b1) {
  int64_t exact = int64_t{acc} + int64_t{a0} * b0 + int64_t{a1} * b1;
  exact = ((exact % (int64_t{1} << 32)) + (int64_t{1} << 32)) % (int64_t{1} << 32);
  return exact >= (int64_t{1} << 31) ? static_cast<int32_t>(exact - (int64_t{1} << 32))
                                     : static_cast<int32_t>(exact);
}

TEST(Avx512Emulation, DpwssdIsTheWrappingPairSum) {
  std::mt19937 rng(1);
  std::uniform_int_distribution<int> i16(-32768, 32767);
  std::uniform_int_distribution<int32_t> i32(std::numeric_limits<int32_t>::min(),
                                             std::numeric_limits<int32_t>::max());
  const int16_t edge[] = {-32768, -32767, -1, 0, 1, 32767};
  for (int trial = 0; trial < 2000; ++trial) {
    EmuOps::I acc, a, b;
    int16_t av[32], bv[32];
    int32_t accv[16];
    for (int i = 0; i < 32; ++i) {
      av[i] = static_cast<int16_t>(trial < 36 ? edge[(trial + i) % 6] : i16(rng));
      bv[i] = static_cast<int16_t>(trial < 36 ? edge[(trial / 6 + i) % 6] : i16(rng));
    }
    for (int i = 0; i < 16; ++i) {
      accv[i] = trial % 3 == 0 ? std::numeric_limits<int32_t>::max() - i : i32(rng);
      acc.l[i] = static_cast<uint32_t>(accv[i]);
      a.l[i] = pack16(av[2 * i], av[2 * i + 1]);
      b.l[i] = pack16(bv[2 * i], bv[2 * i + 1]);
    }
    const EmuOps::I r = EmuOps::dpwssd(acc, a, b);
    for (int i = 0; i < 16; ++i)
      ASSERT_EQ(static_cast<int32_t>(r.l[i]),
                dpwssd_ref(accv[i], av[2 * i], av[2 * i + 1], bv[2 * i], bv[2 * i + 1]))
          << "trial " << trial << " lane " << i;
  }
  // Wraps rather than saturates (that would be vpdpwssds).
  EmuOps::I acc{}, one{};
  for (int i = 0; i < 16; ++i) {
    acc.l[i] = 0x7fffffffu;
    one.l[i] = pack16(1, 0);
  }
  EXPECT_EQ(static_cast<int32_t>(EmuOps::dpwssd(acc, one, one).l[3]),
            std::numeric_limits<int32_t>::min());
}

TEST(Avx512Emulation, WidenAndBroadcast) {
  int8_t src[32];
  for (int i = 0; i < 32; ++i) src[i] = static_cast<int8_t>(i * 9 - 128);
  const EmuOps::I w = EmuOps::widen_i8(src);
  for (int i = 0; i < 32; ++i) {
    const uint16_t half = static_cast<uint16_t>(w.l[i / 2] >> (16 * (i % 2)));
    EXPECT_EQ(static_cast<int16_t>(half), int{src[i]}) << i;
  }
  const int16_t pair[2] = {-5, 300};
  const EmuOps::I b = EmuOps::bcast32(pair);
  for (uint32_t v : b.l) EXPECT_EQ(v, pack16(-5, 300));
}

// ---- int8: emulated kernel == portable kernel, bit for bit ----

struct Problem {
  int64_t m, k, n;
  std::vector<float> x;
  std::vector<uint16_t> w;
  Bf16Matrix mat() const { return {w.data(), n, k}; }
};

Problem make(int64_t m, int64_t k, int64_t n, unsigned seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> d(0.0f, 1.0f);
  Problem p{m, k, n, std::vector<float>(static_cast<size_t>(m * k)),
            std::vector<uint16_t>(static_cast<size_t>(n * k))};
  for (auto& v : p.x) v = d(rng);
  for (auto& v : p.w) v = f32_to_bf16(0.05f * d(rng));
  return p;
}

std::vector<float> run_int8(const Problem& p, const Int8Matrix& q, Int8Kernel k, size_t threads) {
  std::vector<float> y(static_cast<size_t>(p.m * p.n), NAN);
  gemm_int8_kernel(k, p.x.data(), p.m, p.k, q, y.data(), p.n, threads);
  return y;
}

bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

TEST(GemmAvx512Int8, EmulatedEqualsPortableBitwise) {
  unsigned seed = 10;
  for (int64_t k : {32, 100, 71, 256})
    for (int64_t n : {1, 16, 40, 72, 100}) {
      const Problem p = make(13, k, n, seed++);
      const Int8Matrix q = quantize_int8(p.mat(), 1);
      for (int64_t m = 1; m <= 13; ++m) {
        Problem pm = p;
        pm.m = m;
        pm.x.resize(static_cast<size_t>(m * k));
        const auto want = run_int8(pm, q, Int8Kernel::kPortable, 1);
        for (size_t threads : {1, 2, 3})
          ASSERT_TRUE(same_bits(run_int8(pm, q, Int8Kernel::kAvx512Emulated, threads), want))
              << "m " << m << " k " << k << " n " << n << " threads " << threads;
      }
    }
}

// The quantization range's ends: |activation| = 32767 and |weight| = 127 in whole blocks (the
// largest block sums, 32 * 32767 * 127), and zero blocks.
TEST(GemmAvx512Int8, ExtremeBlocksBitwise) {
  Problem p{7, 96, 33, std::vector<float>(7 * 96), std::vector<uint16_t>(33 * 96)};
  for (int64_t i = 0; i < 7 * 96; ++i)
    p.x[static_cast<size_t>(i)] = (i / 96) % 3 == 2 ? 0.0f : ((i % 7) < 3 ? -2.0f : 2.0f);
  for (int64_t i = 0; i < 33 * 96; ++i)
    p.w[static_cast<size_t>(i)] = f32_to_bf16((i % 96) < 32 ? 0.0f : ((i % 5) < 2 ? -0.5f : 0.5f));
  const Int8Matrix q = quantize_int8(p.mat(), 1);
  EXPECT_TRUE(same_bits(run_int8(p, q, Int8Kernel::kAvx512Emulated, 2),
                        run_int8(p, q, Int8Kernel::kPortable, 1)));
}

// Loud on stderr too, so a CI log shows it even where skips are not listed.
void skip_loudly(const std::string& why) {
  std::fprintf(stderr, "\n*** AVX-512 KERNEL TURNED OFF BY ITS PROBE: %s ***\n\n", why.c_str());
}

TEST(GemmAvx512Int8, RealEqualsEmulatedBitwise) {
  if (!isa_supported(Isa::kAvx512))
    GTEST_SKIP() << "this CPU has no AVX-512 F/BW/VL: only the emulated int8 kernel runs here";
  const Int8Kernel real = cpu_has_avx512_vnni() ? Int8Kernel::kAvx512Vnni : Int8Kernel::kAvx512Bw;
  if (int8_kernel_for(Isa::kAvx512) != real) {
    skip_loudly(avx512_probe_note());
    GTEST_SKIP() << "PROBE MISMATCH: " << avx512_probe_note();
  }
  std::vector<Int8Kernel> kernels{Int8Kernel::kAvx512Bw};
  if (cpu_has_avx512_vnni()) kernels.push_back(Int8Kernel::kAvx512Vnni);
  unsigned seed = 50;
  for (int64_t k : {32, 100, 2560})
    for (int64_t n : {16, 72, 100}) {
      const Problem p = make(13, k, n, seed++);
      const Int8Matrix q = quantize_int8(p.mat(), 1);
      const auto want = run_int8(p, q, Int8Kernel::kAvx512Emulated, 1);
      for (Int8Kernel kern : kernels)
        for (size_t threads : {1, 3})
          EXPECT_TRUE(same_bits(run_int8(p, q, kern, threads), want))
              << int8_kernel_name(kern) << " k " << k << " n " << n << " threads " << threads;
    }
}

TEST(GemmAvx512Int8, DispatchFollowsTheIsaLevel) {
  EXPECT_EQ(int8_kernel_for(Isa::kPortable), Int8Kernel::kPortable);
  if (isa_supported(Isa::kAvx2)) {
    EXPECT_EQ(int8_kernel_for(Isa::kAvx2), Int8Kernel::kAvx2);
  }
  if (!isa_supported(Isa::kAvx512)) {
    EXPECT_NE(best_int8_kernel(), Int8Kernel::kAvx512Vnni);
    EXPECT_NE(best_int8_kernel(), Int8Kernel::kAvx512Bw);
  }
  EXPECT_TRUE(int8_kernel_supported(Int8Kernel::kAvx512Emulated));
}

}  // namespace
}  // namespace kev
