#include "kev/serve/prefix_cache.h"

#include <gtest/gtest.h>

#include <string>

namespace kev {
namespace {

std::vector<int32_t> ids(int n, int start = 0) {
  std::vector<int32_t> v(n);
  for (int i = 0; i < n; ++i) v[i] = start + i;
  return v;
}

TEST(PrefixCache, HitsMissesAndLruEvictionByEntries) {
  PrefixCache<std::string> cache(2, 1000);
  cache.insert(ids(3, 0), std::make_shared<const std::string>("a"));
  cache.insert(ids(3, 10), std::make_shared<const std::string>("b"));
  ASSERT_NE(cache.find(ids(3, 0)), nullptr);                           // a is now most recent
  cache.insert(ids(3, 20), std::make_shared<const std::string>("c"));  // evicts b
  EXPECT_EQ(cache.find(ids(3, 10)), nullptr);
  EXPECT_EQ(*cache.find(ids(3, 0)), "a");
  EXPECT_EQ(*cache.find(ids(3, 20)), "c");
  EXPECT_EQ(cache.entries(), 2u);
  EXPECT_EQ(cache.hits(), 3u);
  EXPECT_EQ(cache.misses(), 1u);
  EXPECT_EQ(cache.evictions(), 1u);
}

TEST(PrefixCache, BoundedByTotalTokens) {
  PrefixCache<int> cache(100, 10);
  cache.insert(ids(4, 0), std::make_shared<const int>(1));
  cache.insert(ids(4, 100), std::make_shared<const int>(2));
  EXPECT_EQ(cache.tokens(), 8u);
  cache.insert(ids(4, 200), std::make_shared<const int>(3));  // 12 > 10: evict the oldest
  EXPECT_EQ(cache.tokens(), 8u);
  EXPECT_EQ(cache.find(ids(4, 0)), nullptr);
  cache.insert(ids(11, 300), std::make_shared<const int>(4));  // longer than the bound: skipped
  EXPECT_EQ(cache.find(ids(11, 300)), nullptr);
  EXPECT_EQ(cache.entries(), 2u);
  EXPECT_EQ(cache.evictions(), 1u);  // a prefix too long to cache evicts nothing
}

TEST(PrefixCache, EvictedStateStaysValidForItsHolder) {
  PrefixCache<std::string> cache(1, 100);
  cache.insert(ids(2), std::make_shared<const std::string>("kept"));
  auto held = cache.find(ids(2));
  cache.insert(ids(2, 50), std::make_shared<const std::string>("other"));
  EXPECT_EQ(cache.find(ids(2)), nullptr);
  EXPECT_EQ(*held, "kept");
}

TEST(PrefixCache, KeysCompareByFullContentNotHash) {
  PrefixCache<int> cache(10, 100);
  cache.insert({1, 2, 3}, std::make_shared<const int>(1));
  EXPECT_EQ(cache.find({1, 2}), nullptr);
  EXPECT_EQ(cache.find({1, 2, 3, 4}), nullptr);
  EXPECT_EQ(cache.find({3, 2, 1}), nullptr);
  EXPECT_NE(cache.find({1, 2, 3}), nullptr);
}

}  // namespace
}  // namespace kev
