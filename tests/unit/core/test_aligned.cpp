// AlignedVector (kev/core/aligned.h): every block starts on a 64-byte boundary, below and above
// the size from which blocks are mapped, and keeps its contents through growth across it.
// ZeroedBuffer: every element zero at every size, also where the heap hands back a block that
// held other values; moves hand the block over; resize_for_overwrite keeps a block that holds
// the size asked for and replaces a smaller one with a zeroed one.
#include <gtest/gtest.h>

#include <cstdint>
#include <utility>

#include "kev/core/aligned.h"

namespace kev {
namespace {

bool aligned64(const void* p) {
  return reinterpret_cast<uintptr_t>(p) % 64 == 0;
}

TEST(Aligned, BlocksStartOn64BytesAtEverySize) {
  for (size_t n : {size_t{1}, size_t{3}, size_t{17}, size_t{1000}, kMappedBlockBytes / 4 - 1,
                   kMappedBlockBytes / 4, kMappedBlockBytes / 4 + 1, size_t{3} << 20}) {
    AlignedVector<float> v(n, 1.5f);
    EXPECT_TRUE(aligned64(v.data())) << n;
    EXPECT_EQ(v.front(), 1.5f);
    EXPECT_EQ(v.back(), 1.5f);
  }
}

TEST(Aligned, ContentsSurviveGrowthAcrossTheMappedSize) {
  AlignedVector<float> v;
  for (size_t i = 0; i < kMappedBlockBytes / sizeof(float) * 3; ++i) {
    v.push_back(static_cast<float>(i % 1000));
    if (i % 100000 == 0) {
      ASSERT_TRUE(aligned64(v.data())) << i;
    }
  }
  for (size_t i = 0; i < v.size(); i += 4099) ASSERT_EQ(v[i], static_cast<float>(i % 1000)) << i;
  AlignedVector<float> copy = v;  // a second mapped block, the same contents
  EXPECT_TRUE(aligned64(copy.data()));
  EXPECT_EQ(copy, v);
  v.clear();
  v.shrink_to_fit();
  EXPECT_EQ(copy.back(), static_cast<float>((copy.size() - 1) % 1000));
}

TEST(Aligned, ZeroedBuffersAreZeroAtEverySize) {
  for (size_t n : {size_t{1}, size_t{17}, size_t{1000}, kMappedBlockBytes / 4 - 1,
                   kMappedBlockBytes / 4, size_t{3} << 20}) {
    for (int round = 0; round < 3; ++round) {  // freed dirty blocks of the same size come back
      { AlignedVector<float> dirty(n, 7.0f); }
      ZeroedBuffer<float> z(n);
      ASSERT_EQ(z.size(), n);
      ASSERT_TRUE(aligned64(z.data())) << n;
      for (size_t i = 0; i < n; ++i) ASSERT_EQ(z[i], 0.0f) << n << " " << i;
      for (size_t i = 0; i < n; ++i) z[i] = 7.0f;  // dirty again for the next round
    }
  }
}

TEST(Aligned, ZeroedBufferMovesHandTheBlockOver) {
  ZeroedBuffer<int32_t> a(5000);
  a[4999] = 3;
  const int32_t* block = a.data();
  ZeroedBuffer<int32_t> b(std::move(a));
  EXPECT_EQ(b.data(), block);
  EXPECT_EQ(b[4999], 3);
  EXPECT_TRUE(a.empty());  // NOLINT(bugprone-use-after-move): the moved-from state is specified
  a = ZeroedBuffer<int32_t>(10);
  a = std::move(b);
  EXPECT_EQ(a.data(), block);
  EXPECT_EQ(a.size(), 5000u);
  EXPECT_TRUE(b.empty());  // NOLINT(bugprone-use-after-move): the moved-from state is specified
  EXPECT_THROW(ZeroedBuffer<int32_t>(SIZE_MAX / 2), std::bad_array_new_length);
  EXPECT_TRUE(ZeroedBuffer<float>().empty());
}

TEST(Aligned, ResizeForOverwriteKeepsABlockThatHoldsItAndZeroesANewOne) {
  ZeroedBuffer<float> z;
  z.resize_for_overwrite(1000);
  ASSERT_EQ(z.size(), 1000u);
  for (size_t i = 0; i < 1000; ++i) ASSERT_EQ(z[i], 0.0f) << i;
  z[999] = 5.0f;
  const float* block = z.data();
  z.resize_for_overwrite(10);  // fits: the same block, its elements as they were
  EXPECT_EQ(z.size(), 10u);
  EXPECT_EQ(z.data(), block);
  z.resize_for_overwrite(1000);
  EXPECT_EQ(z.data(), block);
  EXPECT_EQ(z[999], 5.0f);
  z.resize_for_overwrite(kMappedBlockBytes);  // more than it holds: a new zeroed block
  ASSERT_EQ(z.size(), kMappedBlockBytes);
  for (size_t i = 0; i < z.size(); i += 997) ASSERT_EQ(z[i], 0.0f) << i;
  EXPECT_TRUE(aligned64(z.data()));
}

}  // namespace
}  // namespace kev
