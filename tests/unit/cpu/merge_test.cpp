// The LoRA merge kernel (cpu/merge.h): its formula, NaN canonicalization, and every level this
// CPU runs bit-identical to the portable one.
#include "kev/cpu/merge.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <random>
#include <vector>

#include "kev/core/bf16.h"
#include "kev/cpu/isa.h"

namespace kev {
namespace {

std::vector<float> uniform(size_t n, float lo, float hi, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> dist(lo, hi);
  std::vector<float> v(n);
  for (float& x : v) x = dist(rng);
  return v;
}

// Rank 1 makes the sum a single exactly-rounded product, so the float64 evaluation of the
// formula is an exact oracle: round32(round32(round32(b*a) * s) + w), then RNE to BF16.
TEST(Merge, RankOneMatchesFloat64Formula) {
  const int64_t rows = 37, cols = 211;
  auto wf = uniform(rows * cols, -1, 1, 1);
  std::vector<uint16_t> w(wf.size()), out(wf.size());
  for (size_t i = 0; i < wf.size(); ++i) w[i] = f32_to_bf16(wf[i]);
  auto b = uniform(rows, -0.05f, 0.05f, 2), a = uniform(cols, -0.2f, 0.2f, 3);
  for (Isa isa : supported_isas()) {
    merge_lora_rows(w.data(), b.data(), a.data(), 1, cols, 3.0f, rows, out.data(), isa);
    for (int64_t i = 0; i < rows; ++i)
      for (int64_t j = 0; j < cols; ++j) {
        float prod = static_cast<float>(static_cast<double>(b[i]) * a[j]);
        float t = static_cast<float>(static_cast<double>(prod) * 3.0);
        float s = static_cast<float>(static_cast<double>(bf16_to_f32(w[i * cols + j])) + t);
        ASSERT_EQ(out[i * cols + j], f32_to_bf16(s)) << isa_name(isa) << " " << i << "," << j;
      }
  }
}

TEST(Merge, AllIsasBitIdentical) {
  for (int64_t cols : {1, 15, 16, 17, 63, 64, 65, 130, 2560}) {
    const int64_t rows = 9, rank = 16;
    auto wf = uniform(rows * cols, -1, 1, 4);
    std::vector<uint16_t> w(wf.size()), ref(wf.size()), out(wf.size());
    for (size_t i = 0; i < wf.size(); ++i) w[i] = f32_to_bf16(wf[i]);
    w[0] = 0x7f80;  // +inf stays inf
    auto b = uniform(rows * rank, -0.05f, 0.05f, 5), a = uniform(rank * cols, -0.2f, 0.2f, 6);
    merge_lora_rows(w.data(), b.data(), a.data(), rank, cols, 2.0f, rows, ref.data(),
                    Isa::kPortable);
    EXPECT_EQ(ref[0], 0x7f80);
    for (Isa isa : supported_isas()) {
      merge_lora_rows(w.data(), b.data(), a.data(), rank, cols, 2.0f, rows, out.data(), isa);
      EXPECT_EQ(std::memcmp(out.data(), ref.data(), out.size() * 2), 0)
          << isa_name(isa) << " cols " << cols;
    }
  }
}

TEST(Merge, NanBecomesCanonical) {
  std::vector<uint16_t> w(64, 0x3f80), out(64);
  w[0] = 0x7fc1;
  w[1] = 0xffc0;
  w[20] = 0xff81;
  std::vector<float> b = {1.0f}, a(64, 0.0f);
  for (Isa isa : supported_isas()) {
    merge_lora_rows(w.data(), b.data(), a.data(), 1, 64, 2.0f, 1, out.data(), isa);
    EXPECT_EQ(out[20], 0x7fc0);
    EXPECT_EQ(out[0], 0x7fc0);
    EXPECT_EQ(out[1], 0x7fc0);
    EXPECT_EQ(out[2], 0x3f80);
  }
}

}  // namespace
}  // namespace kev
