// Int8 GEMM: the quantization rule, accuracy against a double evaluation of the unquantized
// product, and the reproducibility promises of gemm_int8.h (ISA-, batch- and
// thread-independence, bitwise).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>
#include <tuple>
#include <vector>

#include "gemm_problem.h"
#include "kev/core/bf16.h"
#include "kev/core/error.h"
#include "kev/cpu/gemm_int8.h"
#include "kev/cpu/precision_kernels.h"

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

// ---- 8-bit activations (`--precision w8a8`) ----

// gemm_int8.h's contract with 8-bit activations, evaluated here from its text: per row and
// block of 32, amax = max |v|, q = nearbyint(v * (127 / amax)) clamped to [-127, 127], scale
// amax / 127 (a block with amax < 1e-30: zeros, scale 0); the weights by quantize_row_int8 (its
// own rule is tested above); exact integer block sums; then acc = fma(float(isum), sx * sw, acc)
// over the blocks in order.
std::vector<float> contract_8bit(const Problem& p) {
  const int64_t blocks = (p.k + 31) / 32;
  std::vector<int8_t> qw(static_cast<size_t>(p.n * blocks * 32));
  std::vector<float> sw(static_cast<size_t>(p.n * blocks));
  for (int64_t j = 0; j < p.n; ++j) {
    std::vector<float> row(static_cast<size_t>(p.k));
    for (int64_t t = 0; t < p.k; ++t) row[static_cast<size_t>(t)] = bf16_to_f32(p.w[j * p.k + t]);
    quantize_row_int8(row.data(), p.k, qw.data() + j * blocks * 32, sw.data() + j * blocks);
  }
  std::vector<float> y(static_cast<size_t>(p.m * p.n));
  for (int64_t i = 0; i < p.m; ++i) {
    std::vector<int> qx(static_cast<size_t>(blocks * 32), 0);
    std::vector<float> sx(static_cast<size_t>(blocks), 0.0f);
    for (int64_t b = 0; b < blocks; ++b) {
      float amax = 0.0f;
      for (int64_t t = b * 32; t < std::min(p.k, b * 32 + 32); ++t)
        amax = std::max(amax, std::fabs(p.x[i * p.k + t]));
      if (!(amax >= 1e-30f)) continue;
      sx[static_cast<size_t>(b)] = amax / 127.0f;
      for (int64_t t = b * 32; t < std::min(p.k, b * 32 + 32); ++t) {
        const float r = std::nearbyint(p.x[i * p.k + t] * (127.0f / amax));
        qx[static_cast<size_t>(t)] = static_cast<int>(std::min(127.0f, std::max(-127.0f, r)));
      }
    }
    for (int64_t j = 0; j < p.n; ++j) {
      float acc = 0.0f;
      for (int64_t b = 0; b < blocks; ++b) {
        int64_t isum = 0;
        for (int64_t t = b * 32; t < b * 32 + 32; ++t)
          isum +=
              int64_t{qx[static_cast<size_t>(t)]} * qw[static_cast<size_t>(j * blocks * 32 + t)];
        acc = std::fma(static_cast<float>(isum),
                       sx[static_cast<size_t>(b)] * sw[static_cast<size_t>(j * blocks + b)], acc);
      }
      y[static_cast<size_t>(i * p.n + j)] = acc;
    }
  }
  return y;
}

// Every kernel that runs here (the portable one, each level's, the byte kernels and the
// emulations) gives the contract's bits, on shapes at the tile and block edges, on any thread
// count; and the result is not the 16-bit one.
TEST(GemmInt8, EightBitActivationsFollowTheContract) {
  for (auto [m, k, n] : {std::tuple<int64_t, int64_t, int64_t>{1, 1, 1},
                         {3, 31, 17},
                         {6, 64, 32},
                         {7, 95, 33},
                         {13, 256, 70},
                         {23, 700, 53}}) {
    Problem p = gemm_test::make_normal(m, k, n, static_cast<unsigned>(3 * m + k + n));
    const Int8Matrix q = quantize_int8(p.mat(), 1);
    const std::vector<float> want = contract_8bit(p);
    for (Int8Kernel kern : int8_kernels()) {
      if (!int8_kernel_supported(kern)) continue;
      for (size_t threads : {1, 3}) {
        std::vector<float> y(want.size(), NAN);
        gemm_int8_kernel(kern, p.x.data(), m, k, q, y.data(), n, threads, ActivationWidth::k8Bit);
        ASSERT_EQ(0, std::memcmp(y.data(), want.data(), y.size() * 4))
            << int8_kernel_name(kern) << " threads=" << threads << " " << m << "x" << k << "x" << n;
      }
    }
    for (Isa isa : supported_isas()) {
      std::vector<float> y(want.size(), NAN);
      gemm_int8_isa(isa, p.x.data(), m, k, q, y.data(), n, 2, ActivationWidth::k8Bit);
      ASSERT_EQ(0, std::memcmp(y.data(), want.data(), y.size() * 4)) << isa_name(isa);
    }
    if (k >= 64) {
      std::vector<float> y16(want.size());
      gemm_int8_isa(Isa::kPortable, p.x.data(), m, k, q, y16.data(), n, 1);
      EXPECT_NE(0, std::memcmp(y16.data(), want.data(), y16.size() * 4));
    }
  }
}

// Whole blocks at the ends of both ranges (|activation| and |weight| 127: the largest byte sums,
// with u = 255 and u = 1) and zero blocks, through every kernel.
TEST(GemmInt8, EightBitExtremeBlocksBitwise) {
  const Problem p = gemm_test::make_extreme_blocks();
  const Int8Matrix q = quantize_int8(p.mat(), 1);
  const std::vector<float> want = contract_8bit(p);
  for (Int8Kernel kern : int8_kernels()) {
    if (!int8_kernel_supported(kern)) continue;
    std::vector<float> y(want.size(), NAN);
    gemm_int8_kernel(kern, p.x.data(), p.m, p.k, q, y.data(), p.n, 2, ActivationWidth::k8Bit);
    EXPECT_EQ(0, std::memcmp(y.data(), want.data(), y.size() * 4)) << int8_kernel_name(kern);
  }
}

// A byte kernel cannot multiply 16-bit activations: refused by name, not run.
TEST(GemmInt8, ByteKernelsRefuseSixteenBitActivations) {
  Problem p = gemm_test::make_normal(2, 64, 16, 4);
  const Int8Matrix q = quantize_int8(p.mat(), 1);
  std::vector<float> y(32);
  int byte_kernels = 0;
  for (Int8Kernel kern : int8_kernels()) {
    if (!int8_kernel_reads_bytes(kern) || !int8_kernel_supported(kern)) continue;
    ++byte_kernels;
    EXPECT_THROW(gemm_int8_kernel(kern, p.x.data(), 2, 64, q, y.data(), 16, 1), Error)
        << int8_kernel_name(kern);
  }
  EXPECT_GE(byte_kernels, 1);  // the emulation runs everywhere
}

// The relative RMS error of y against a double evaluation of the unquantized product.
double relative_rms_error(const Problem& p, const std::vector<float>& y) {
  double err2 = 0, ref2 = 0;
  for (int64_t i = 0; i < p.m; ++i)
    for (int64_t j = 0; j < p.n; ++j) {
      double ref = 0;
      for (int64_t t = 0; t < p.k; ++t)
        ref += double(p.x[i * p.k + t]) * bf16_to_f32(p.w[j * p.k + t]);
      err2 += (y[i * p.n + j] - ref) * (y[i * p.n + j] - ref);
      ref2 += ref * ref;
    }
  return std::sqrt(err2 / ref2);
}

TEST(GemmInt8, EightBitCloseToUnquantizedProduct) {
  Problem p = gemm_test::make_normal(9, 1024, 70, 31);
  const Int8Matrix q = quantize_int8(p.mat(), 2);
  std::vector<float> y(static_cast<size_t>(p.m * p.n));
  gemm_int8(p.x.data(), p.m, p.k, q, y.data(), p.n, 2, ActivationWidth::k8Bit);
  // Each factor within half a step (amax / 254) of its block: about 1% relative RMS here.
  EXPECT_LT(relative_rms_error(p, y), 0.02);
}

// ---- Quantized bundles' stored forms (gemm_int8.h): q8 rows, q4 rows and their kernels ----

// The rows of a Bf16 matrix as FP32.
std::vector<float> row_of(const Problem& p, int64_t r) {
  std::vector<float> v(static_cast<size_t>(p.k));
  for (int64_t t = 0; t < p.k; ++t) v[static_cast<size_t>(t)] = bf16_to_f32(p.w[r * p.k + t]);
  return v;
}

TEST(StoredWeights, Q8RowsPackToTheLoadTimeQuantization) {
  for (auto [k, n] : {std::pair<int64_t, int64_t>{83, 37}, {256, 16}, {31, 1}}) {
    Problem p = gemm_test::make_normal(1, k, n, 3);
    const int64_t blocks = (k + 31) / 32;
    std::vector<int8_t> q(static_cast<size_t>(n * blocks * 32));
    std::vector<float> s(static_cast<size_t>(n * blocks));
    for (int64_t r = 0; r < n; ++r)
      quantize_row_int8(row_of(p, r).data(), k, q.data() + r * blocks * 32, s.data() + r * blocks);
    const Int8Matrix stored = pack_q8_rows(q.data(), s.data(), n, k, 2);
    const Int8Matrix loaded = quantize_int8(p.mat(), 2);
    EXPECT_EQ(stored.q, loaded.q) << k << "x" << n;
    EXPECT_EQ(stored.scale, loaded.scale) << k << "x" << n;
  }
}

// The q4 rule against its definition: each value's nearest step of s (the F16 scale, signed so
// the block's largest magnitude is -8), clamped to [-8, 7].
TEST(StoredWeights, Q4RowRule) {
  std::vector<float> v(40, 0.0f);
  v[0] = 8.0f;    // the first largest magnitude: s = 8 / -8 = -1, and it becomes -8
  v[1] = -3.5f;   // tie: 4
  v[2] = 2.5f;    // tie: -2
  v[3] = -8.0f;   // 8: clamped to 7
  v[34] = 1e-3f;  // second block: s = f16(1e-3 / -8), the value -8
  std::vector<uint8_t> q(32, 0xee);
  uint16_t s[2];
  ASSERT_TRUE(quantize_row_q4(v.data(), 40, q.data(), s));
  EXPECT_EQ(s[0], f32_to_f16(-1.0f));
  EXPECT_EQ(q[0], 0x48);  // k 0: -8 (low nibble), k 1: 4 (high)
  EXPECT_EQ(q[1], 0x7e);  // k 2: -2, k 3: 7
  EXPECT_EQ(s[1], f32_to_f16(1e-3f / -8.0f));
  EXPECT_EQ(q[16 + 1], 0x08);
  for (int i = 16; i < 32; ++i) {
    if (i != 17) {
      EXPECT_EQ(q[i], 0) << i;  // the rest of block 1, padding included
    }
  }
  std::vector<float> zero(32, 0.0f);
  ASSERT_TRUE(quantize_row_q4(zero.data(), 32, q.data(), s));
  EXPECT_EQ(s[0], 0);
  std::vector<float> huge(32, 1e6f);
  EXPECT_FALSE(quantize_row_q4(huge.data(), 32, q.data(), s));  // 1e6 / 8 overflows F16
  // Random rows: every value within half a step of q * s, or clamped at the ends.
  Problem p = gemm_test::make_normal(1, 200, 9, 4);
  for (int64_t r = 0; r < 9; ++r) {
    const std::vector<float> row = row_of(p, r);
    std::vector<uint8_t> qr(7 * 16);
    std::vector<uint16_t> sr(7);
    ASSERT_TRUE(quantize_row_q4(row.data(), 200, qr.data(), sr.data()));
    for (int64_t t = 0; t < 200; ++t) {
      const uint8_t b = qr[static_cast<size_t>(t / 2)];
      const int nib = t % 2 == 0 ? (b & 0xf) : (b >> 4);
      const int val = nib >= 8 ? nib - 16 : nib;
      const double sc = f16_to_f32(sr[static_cast<size_t>(t / 32)]);
      const double err = std::fabs(row[static_cast<size_t>(t)] - val * sc);
      if (val > -8 && val < 7) {
        ASSERT_LE(err, std::fabs(sc) / 2 * (1 + 1e-6)) << r << " " << t;
      }
    }
  }
}

// q5's rule against its definition, as q4's above: s = f16(m / -16), values in [-16, 15], the
// low 4 bits as q4's nibbles and the fifth bits in the block's trailing little-endian word.
TEST(StoredWeights, Q5RowRule) {
  std::vector<float> v(40, 0.0f);
  v[0] = 16.0f;   // the first largest magnitude: s = 16 / -16 = -1, and it becomes -16
  v[1] = -3.5f;   // tie: 4
  v[2] = 2.5f;    // tie: -2
  v[3] = -16.0f;  // 16: clamped to 15
  v[5] = 9.0f;    // -9: 0b10111
  v[34] = 1e-3f;  // second block: s = f16(1e-3 / -16), the value -16
  std::vector<uint8_t> q(40, 0xee);
  uint16_t s[2];
  ASSERT_TRUE(quantize_row_q5(v.data(), 40, q.data(), s));
  EXPECT_EQ(s[0], f32_to_f16(-1.0f));
  EXPECT_EQ(q[0], 0x40);  // k 0: -16 = 0b10000 (low 4 bits 0), k 1: 4
  EXPECT_EQ(q[1], 0xfe);  // k 2: -2 = 0b11110, k 3: 15 = 0b01111
  EXPECT_EQ(q[2], 0x70);  // k 4: 0, k 5: -9 = 0b10111
  // fifth bits: k 0 (-16), k 2 (-2), k 5 (-9); not k 1, 3, 4
  EXPECT_EQ(q[16], 0x25);
  EXPECT_EQ(q[17], 0);
  EXPECT_EQ(q[18], 0);
  EXPECT_EQ(q[19], 0);
  EXPECT_EQ(s[1], f32_to_f16(1e-3f / -16.0f));
  EXPECT_EQ(q[20 + 1], 0x00);   // k 34 = 2 in block 1: -16, low bits 0
  EXPECT_EQ(q[20 + 16], 0x04);  // its fifth bit
  std::vector<float> huge(32, 2e6f);
  EXPECT_FALSE(quantize_row_q5(huge.data(), 32, q.data(), s));  // 2e6 / 16 overflows F16
  std::vector<float> fits(32, 1e6f);
  EXPECT_TRUE(quantize_row_q5(fits.data(), 32, q.data(), s));  // 1e6 / 16 does not
}

// The value k of a stored q4 (bits 4) or q5 (bits 5) row, from the format's description.
int stored_value(const uint8_t* row, int bits, int64_t t) {
  const int64_t block_bytes = bits == 5 ? 20 : 16;
  const uint8_t* blk = row + (t / 32) * block_bytes;
  const int64_t i = t % 32;
  int v = i % 2 == 0 ? (blk[i / 2] & 0xf) : (blk[i / 2] >> 4);
  if (bits == 5) {
    const uint32_t word =
        blk[16] | blk[17] << 8 | blk[18] << 16 | static_cast<uint32_t>(blk[19]) << 24;
    v |= static_cast<int>((word >> i) & 1) << 4;
  }
  return v >= (1 << (bits - 1)) ? v - (1 << bits) : v;
}

// Stored q4 or q5 rows for the problem's weights, and the same values as q8 rows (each value
// widened, each F16 scale as FP32): the int8 tiles must see the same numbers either way.
struct LowBitCase {
  Int4Matrix low;
  Int8Matrix as_q8;
};
LowBitCase low_bit_case(const Problem& p, int bits) {
  const int64_t blocks = (p.k + 31) / 32, block_bytes = bits == 5 ? 20 : 16;
  std::vector<uint8_t> q(static_cast<size_t>(p.n * blocks * block_bytes));
  std::vector<uint16_t> s(static_cast<size_t>(p.n * blocks));
  std::vector<int8_t> q8(static_cast<size_t>(p.n * blocks * 32));
  std::vector<float> s8(s.size());
  for (int64_t r = 0; r < p.n; ++r) {
    uint8_t* row = q.data() + r * blocks * block_bytes;
    const bool ok = bits == 5
                        ? quantize_row_q5(row_of(p, r).data(), p.k, row, s.data() + r * blocks)
                        : quantize_row_q4(row_of(p, r).data(), p.k, row, s.data() + r * blocks);
    EXPECT_TRUE(ok);
    for (int64_t t = 0; t < blocks * 32; ++t)
      q8[static_cast<size_t>(r * blocks * 32 + t)] =
          static_cast<int8_t>(stored_value(row, bits, t));
    for (int64_t b = 0; b < blocks; ++b)
      s8[static_cast<size_t>(r * blocks + b)] = f16_to_f32(s[static_cast<size_t>(r * blocks + b)]);
  }
  return {bits == 5 ? pack_q5_rows(q.data(), s.data(), p.n, p.k, 2)
                    : pack_q4_rows(q.data(), s.data(), p.n, p.k, 2),
          pack_q8_rows(q8.data(), s8.data(), p.n, p.k, 2)};
}

// Every kernel, at each activation width it runs (the byte kernels: 8-bit only) and on 1-3
// threads, gives on a stored low-bit matrix the bits the portable int8 kernel gives on its widened
// values.
void expect_widened_bits(const Problem& p, const Int4Matrix& low, const Int8Matrix& as_q8,
                         const char* what) {
  const int64_t m = p.m, k = p.k, n = p.n;
  for (ActivationWidth width : {ActivationWidth::k16Bit, ActivationWidth::k8Bit}) {
    std::vector<float> ref(static_cast<size_t>(m * n));
    gemm_int8_kernel(kPortableInt8Kernel, p.x.data(), m, k, as_q8, ref.data(), n, 1, width);
    for (Int8Kernel kern : int8_kernels()) {
      if (!int8_kernel_supported(kern)) continue;
      if (int8_kernel_reads_bytes(kern) && width != ActivationWidth::k8Bit) continue;
      for (size_t threads : {1, 2, 3}) {
        std::vector<float> y(static_cast<size_t>(m * n), NAN);
        gemm_int4_kernel(kern, p.x.data(), m, k, low, y.data(), n, threads, width);
        ASSERT_EQ(0, std::memcmp(y.data(), ref.data(), y.size() * 4))
            << what << " " << int8_kernel_name(kern) << " threads=" << threads << " " << m << "x"
            << k << "x" << n << (width == ActivationWidth::k8Bit ? " 8-bit" : " 16-bit");
      }
    }
  }
}

constexpr std::tuple<int64_t, int64_t, int64_t> kLowBitShapes[] = {
    {1, 1, 1}, {5, 33, 15}, {7, 95, 33}, {13, 256, 70}, {23, 700, 53}, {3, 9000, 70}};

// A stored q4z (bits 4) or q5z (bits 5) row's value k and its block's scale, from the format's
// description: t from the nibbles (two's complement; for q5z with the fifth bit from the word
// after them), sc and z the block's two trailing bytes, d the F16 scale of its super-block of 8
// blocks; the value is (d sc / u) (u t + z) with u = 8 for q4z and 4 for q5z.
struct FittedValue {
  int widened = 0;  // u t + z
  float scale = 0.0f;
};
FittedValue fitted_value(const uint8_t* row, const uint16_t* super, int64_t k, int bits) {
  const int64_t block_bytes = bits == 5 ? 22 : 18;
  const int unit = bits == 5 ? 4 : 8;
  const uint8_t* blk = row + (k / 32) * block_bytes;
  const int64_t i = k % 32;
  int t = i % 2 == 0 ? (blk[i / 2] & 0xf) : (blk[i / 2] >> 4);
  if (bits == 5) {
    t |= ((blk[16 + i / 8] >> (i % 8)) & 1) << 4;
    if (t >= 16) t -= 32;
  } else if (t >= 8) {
    t -= 16;
  }
  const int z = static_cast<int8_t>(blk[block_bytes - 1]);
  return {unit * t + z, f16_to_f32(super[k / 256]) * static_cast<float>(blk[block_bytes - 2]) /
                            static_cast<float>(unit)};
}

bool quantize_row_fitted(int bits, const float* v, int64_t n, uint8_t* q, uint16_t* d) {
  return bits == 5 ? quantize_row_q5z(v, n, q, d) : quantize_row_q4z(v, n, q, d);
}

// q4z's and q5z's rule on values whose answer is known: a block on a grid of 16 (q5z: 32) levels
// is stored exactly (sc and z chosen so that d sc / u (u t + z) lands on each level); each
// super-block of 8 blocks has its own d; a non-finite value or an overflowing d is refused.
TEST(StoredWeights, FittedRowRule) {
  for (int bits : {4, 5}) {
    SCOPED_TRACE(bits == 5 ? "q5z" : "q4z");
    const int64_t n = 300;  // 10 blocks: super-blocks of 8 and 2 (the last block padded)
    const int levels = 1 << bits, unit = bits == 5 ? 4 : 8;
    const int64_t block_bytes = bits == 5 ? 22 : 18;
    std::vector<float> v(n, 0.0f);
    // the levels 1/64 apart, offset by 3/4 of a step from the grid through 0 (z = 3/4 unit)
    for (int64_t k = 0; k < 32; ++k)
      v[k] = (static_cast<float>(k % levels) - static_cast<float>(levels / 2) + 0.75f) / 64.0f;
    for (int64_t k = 256; k < n; ++k) v[k] = static_cast<float>((k * 7) % 23) - 11.0f;
    std::vector<uint8_t> q(static_cast<size_t>(10 * block_bytes), 0xee);
    uint16_t d[2];
    ASSERT_TRUE(quantize_row_fitted(bits, v.data(), n, q.data(), d));
    // super-block 0: the largest r is block 0's span / (levels - 1) (against the largest
    // magnitude / (levels - 2))
    const float span = static_cast<float>(levels - 1);
    EXPECT_EQ(d[0], f32_to_f16((span / 64.0f) / span / 255.0f));
    EXPECT_EQ(static_cast<int8_t>(q[static_cast<size_t>(block_bytes - 1)]), unit * 3 / 4);
    for (int64_t k = 0; k < 32; ++k) {
      const FittedValue w = fitted_value(q.data(), d, k, bits);
      EXPECT_NEAR(w.scale * static_cast<float>(w.widened), v[k], 0.02f / 64.0f) << k;
      EXPECT_GE(w.widened, -127);
      EXPECT_LE(w.widened, 127);
    }
    for (int64_t k = 32; k < 256; ++k) {  // zero blocks: small values, at most half a step off
      const FittedValue w = fitted_value(q.data(), d, k, bits);
      EXPECT_LE(std::fabs(w.scale * static_cast<float>(w.widened)),
                w.scale * static_cast<float>(unit) / 2.0f + 1e-12f)
          << k;
    }
    // super-block 1: values -11..11 over 23 levels, each within 3/4 of its block's step (the
    // least-squares fit of the padded block, 20 zeros and 12 values, moves those a little more
    // than half a step to keep the zeros exact)
    EXPECT_EQ(d[1], f32_to_f16(std::max(22.0f / span, 11.0f / (span - 1.0f)) / 255.0f));
    for (int64_t k = 256; k < n; ++k) {
      const FittedValue w = fitted_value(q.data(), d, k, bits);
      EXPECT_LE(std::fabs(w.scale * static_cast<float>(w.widened) - v[k]),
                0.75f * w.scale * static_cast<float>(unit))
          << k;
    }
    std::vector<float> bad(32, 1.0f);
    bad[5] = NAN;
    EXPECT_FALSE(quantize_row_fitted(bits, bad.data(), 32, q.data(), d));
    bad[5] = INFINITY;
    EXPECT_FALSE(quantize_row_fitted(bits, bad.data(), 32, q.data(), d));
    std::vector<float> huge(32, 0.0f);
    huge[0] = 3e7f;  // r = 3e7 / 14 (or / 30), / 255 = 8400 at most: fits
    EXPECT_TRUE(quantize_row_fitted(bits, huge.data(), 32, q.data(), d));
    huge[1] = -3e9f;  // r = 3e9 / 15 (or / 31) / 255: overflows F16
    EXPECT_FALSE(quantize_row_fitted(bits, huge.data(), 32, q.data(), d));
  }
}

// Stored q4z or q5z rows, and the same values as q8 rows (u t + z at scale d sc / u, exact in
// FP32).
LowBitCase fitted_case(const Problem& p, int bits) {
  const int64_t blocks = (p.k + 31) / 32, supers = (blocks + 7) / 8;
  const int64_t block_bytes = bits == 5 ? 22 : 18;
  std::vector<uint8_t> q(static_cast<size_t>(p.n * blocks * block_bytes));
  std::vector<uint16_t> d(static_cast<size_t>(p.n * supers));
  std::vector<int8_t> q8(static_cast<size_t>(p.n * blocks * 32));
  std::vector<float> s8(static_cast<size_t>(p.n * blocks));
  for (int64_t r = 0; r < p.n; ++r) {
    uint8_t* row = q.data() + r * blocks * block_bytes;
    const uint16_t* dr = d.data() + r * supers;
    EXPECT_TRUE(quantize_row_fitted(bits, row_of(p, r).data(), p.k, row, d.data() + r * supers));
    for (int64_t t = 0; t < blocks * 32; ++t) {
      const FittedValue w = fitted_value(row, dr, t, bits);
      q8[static_cast<size_t>(r * blocks * 32 + t)] = static_cast<int8_t>(w.widened);
      s8[static_cast<size_t>(r * blocks + t / 32)] = w.scale;
    }
  }
  return {bits == 5 ? pack_q5z_rows(q.data(), d.data(), p.n, p.k, 2)
                    : pack_q4z_rows(q.data(), d.data(), p.n, p.k, 2),
          pack_q8_rows(q8.data(), s8.data(), p.n, p.k, 2)};
}

// q4, q5, q4z and q5z: every kernel on the stored matrix gives the int8 kernel's bits on the
// independently decoded values.
TEST(StoredWeights, LowBitKernelsEqualTheInt8KernelsOnTheWidenedValues) {
  for (bool fitted : {false, true})
    for (int bits : {4, 5})
      for (auto [m, k, n] : kLowBitShapes) {
        Problem p = gemm_test::make_normal(m, k, n, static_cast<unsigned>(m + k + n));
        const LowBitCase c = fitted ? fitted_case(p, bits) : low_bit_case(p, bits);
        const char* kind = fitted ? (bits == 5 ? "q5z" : "q4z") : (bits == 5 ? "q5" : "q4");
        expect_widened_bits(p, c.low, c.as_q8, kind);
      }
}

TEST(StoredWeights, LowBitCloseToUnquantizedProduct) {
  Problem p = gemm_test::make_normal(9, 1024, 70, 21);
  std::vector<float> y(static_cast<size_t>(p.m * p.n));
  gemm_int4_kernel(best_int8_kernel(), p.x.data(), p.m, p.k, low_bit_case(p, 4).low, y.data(), p.n,
                   2);
  // 15 levels over each block's range: relative RMS error about 0.1 on normal weights.
  const double e4 = relative_rms_error(p, y);
  EXPECT_LT(e4, 0.15);
  EXPECT_GT(e4, 0.01);  // and it is 4-bit: not the 8-bit error
  gemm_int4_kernel(best_int8_kernel(), p.x.data(), p.m, p.k, low_bit_case(p, 5).low, y.data(), p.n,
                   2);
  const double e5 = relative_rms_error(p, y);  // half the step: about half the error
  EXPECT_GT(e5, 0.4 * e4);
  EXPECT_LT(e5, 0.6 * e4);
  // q4z: a fitted step and zero per block (4.56 bits): on normal weights at least 8% less error
  // than q4's rule (numpy, 40,000 blocks: 12%), more than q5's.
  gemm_int4_kernel(best_int8_kernel(), p.x.data(), p.m, p.k, fitted_case(p, 4).low, y.data(), p.n,
                   2);
  const double ez = relative_rms_error(p, y);
  EXPECT_LT(ez, 0.92 * e4);
  EXPECT_GT(ez, e5);
  // q5z: the same against q5 (numpy, 8,000 normal blocks: 19% less error), more than half q4z's.
  gemm_int4_kernel(best_int8_kernel(), p.x.data(), p.m, p.k, fitted_case(p, 5).low, y.data(), p.n,
                   2);
  const double ez5 = relative_rms_error(p, y);
  EXPECT_LT(ez5, 0.92 * e5);
  EXPECT_GT(ez5, 0.4 * ez);
  EXPECT_LT(ez5, 0.6 * ez);
}

}  // namespace
}  // namespace kev
