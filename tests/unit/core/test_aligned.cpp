// AlignedVector (kev/core/aligned.h): every block starts on a 64-byte boundary, below and above
// the size from which blocks are mapped, and keeps its contents through growth across it.
#include <gtest/gtest.h>

#include <cstdint>

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

}  // namespace
}  // namespace kev
