#include "kev/score/prefix_cache.h"

#include <gtest/gtest.h>

#include <string>

namespace kev {
namespace {

using Ids = std::vector<int32_t>;

Ids ids(int n, int start = 0) {
  Ids v(n);
  for (int i = 0; i < n; ++i) v[i] = start + i;
  return v;
}
Ids cat(Ids a, const Ids& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

TEST(PrefixCache, HitsMissesAndLruEvictionByEntries) {
  PrefixCache<std::string> cache(2, 1000);
  cache.insert(ids(3, 0), std::make_shared<const std::string>("a"), 0);
  cache.insert(ids(3, 10), std::make_shared<const std::string>("b"), 0);
  ASSERT_NE(cache.find(ids(3, 0)), nullptr);                              // a is now most recent
  cache.insert(ids(3, 20), std::make_shared<const std::string>("c"), 0);  // evicts b
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
  cache.insert(ids(4, 0), std::make_shared<const int>(1), 0);
  cache.insert(ids(4, 100), std::make_shared<const int>(2), 0);
  EXPECT_EQ(cache.tokens(), 8u);
  cache.insert(ids(4, 200), std::make_shared<const int>(3), 0);  // 12 > 10: evict the oldest
  EXPECT_EQ(cache.tokens(), 8u);
  EXPECT_EQ(cache.find(ids(4, 0)), nullptr);
  cache.insert(ids(11, 300), std::make_shared<const int>(4), 0);  // longer than the bound: skipped
  EXPECT_EQ(cache.find(ids(11, 300)), nullptr);
  EXPECT_EQ(cache.entries(), 2u);
  EXPECT_EQ(cache.evictions(), 1u);  // a prefix too long to cache evicts nothing
}

TEST(PrefixCache, EvictedStateStaysValidForItsHolder) {
  PrefixCache<std::string> cache(1, 100);
  cache.insert(ids(2), std::make_shared<const std::string>("kept"), 0);
  auto held = cache.find(ids(2));
  cache.insert(ids(2, 50), std::make_shared<const std::string>("other"), 0);
  EXPECT_EQ(cache.find(ids(2)), nullptr);
  EXPECT_EQ(*held, "kept");
}

TEST(PrefixCache, KeysCompareByFullContentNotHash) {
  PrefixCache<int> cache(10, 100);
  cache.insert(Ids{1, 2, 3}, std::make_shared<const int>(1), 0);
  EXPECT_EQ(cache.find(Ids{1, 2}), nullptr);
  EXPECT_EQ(cache.find(Ids{1, 2, 3, 4}), nullptr);
  EXPECT_EQ(cache.find(Ids{3, 2, 1}), nullptr);
  EXPECT_NE(cache.find(Ids{1, 2, 3}), nullptr);
}

TEST(PrefixCache, LongestSavedPrefixWins) {
  PrefixCache<int> cache(10, 1000);
  const Ids a = ids(5), b = cat(a, ids(4, 50)), c = cat(b, ids(3, 90));
  cache.insert(a, std::make_shared<const int>(5), 0);
  cache.insert(c, std::make_shared<const int>(12), 0);
  cache.insert(ids(7, 1), std::make_shared<const int>(-1), 0);  // same start id 1.., not a prefix
  // Longer than b and not b's prefix: c does not match b; a does.
  auto m = cache.find_longest(b);
  EXPECT_EQ(m.length, 5u);
  EXPECT_EQ(*m.state, 5);
  // c itself and anything continuing c: c.
  EXPECT_EQ(cache.find_longest(c).length, 12u);
  m = cache.find_longest(cat(c, ids(30, 500)));
  EXPECT_EQ(m.length, 12u);
  EXPECT_EQ(*m.state, 12);
  // Diverging after a's 5 ids (a rewritten tail): a.
  EXPECT_EQ(cache.find_longest(cat(a, ids(9, 700))).length, 5u);
  // Diverging inside a, or shorter than a: nothing.
  EXPECT_EQ(cache.find_longest(Ids{0, 1, 2, 9, 9, 9}).state, nullptr);
  EXPECT_EQ(cache.find_longest(ids(4)).state, nullptr);
  EXPECT_EQ(cache.find_longest(Ids{}).state, nullptr);
  EXPECT_EQ(cache.hits(), 4u);
  EXPECT_EQ(cache.misses(), 3u);
  // A usable() filter skips lengths (the chunked GDN form's boundaries): c is refused, a taken.
  m = cache.find_longest(c, [](size_t n) { return n % 5 == 0; });
  EXPECT_EQ(m.length, 5u);
}

TEST(PrefixCache, HashCollisionsAreResolvedByContent) {
  // Many same-length keys and many lengths: every prefix lookup finds exactly its own entry.
  PrefixCache<int> cache(1000, 100000);
  const Ids base = ids(200, 7);
  for (int n = 1; n <= 200; n += 3)
    cache.insert(Ids(base.begin(), base.begin() + n), std::make_shared<const int>(n), 0);
  for (int n = 1; n <= 200; ++n) {
    auto m = cache.find_longest(Ids(base.begin(), base.begin() + n));
    ASSERT_NE(m.state, nullptr);
    EXPECT_EQ(m.length, static_cast<size_t>((n - 1) / 3 * 3 + 1));
    EXPECT_EQ(*m.state, static_cast<int>(m.length));
  }
}

TEST(PrefixCache, BytesAreAccountedAndBounded) {
  // Each entry costs its state's bytes plus 4 per id.
  PrefixCache<int> cache(PrefixCacheLimits{100, 100000, 1000});
  cache.insert(ids(10), std::make_shared<const int>(1), 260);       // 300
  cache.insert(ids(20, 100), std::make_shared<const int>(2), 320);  // 400
  EXPECT_EQ(cache.bytes(), 700u);
  cache.insert(ids(10), std::make_shared<const int>(3), 160);  // refreshed: 200
  EXPECT_EQ(cache.bytes(), 600u);
  EXPECT_EQ(cache.entries(), 2u);
  cache.insert(ids(5, 900), std::make_shared<const int>(4), 480);  // 500: 1100 > 1000
  EXPECT_EQ(cache.entries(), 2u);                                  // the LRU one (ids(20)) left
  EXPECT_EQ(cache.find(ids(20, 100)), nullptr);
  EXPECT_EQ(cache.bytes(), 700u);
  EXPECT_EQ(cache.evictions(), 1u);
  cache.insert(ids(1, 5000), std::make_shared<const int>(5), 1000);  // over the bound alone
  EXPECT_EQ(cache.find(ids(1, 5000)), nullptr);
  EXPECT_EQ(cache.bytes(), 700u);
  EXPECT_EQ(cache.evictions(), 1u);
}

TEST(PrefixCache, SharedBuffersCountOnceWhileAnyEntryHoldsThem) {
  PrefixCache<int> cache(PrefixCacheLimits{100, 100000, 10000});
  int block = 0, own1 = 0, own2 = 0, other = 0;  // addresses standing for buffers
  const Ids a = ids(10), b = cat(a, ids(5, 100));
  cache.insert(a, std::make_shared<const int>(1), {{&block, 1000}, {&own1, 100}});
  EXPECT_EQ(cache.bytes(), 1100u + 40u);
  cache.insert(b, std::make_shared<const int>(2), {{&block, 1000}, {&own2, 200}});
  EXPECT_EQ(cache.bytes(), 1100u + 40u + 200u + 60u);  // the shared block once
  cache.demote(a);
  cache.insert(ids(1, 900), std::make_shared<const int>(3), {{&other, 8730}});  // evicts a
  EXPECT_EQ(cache.find(a), nullptr);
  ASSERT_NE(cache.find(b), nullptr);
  // b still holds the block: it stays counted; a's own buffer and key are gone.
  EXPECT_EQ(cache.bytes(), 1000u + 200u + 60u + 8730u + 4u);
  EXPECT_LE(cache.bytes(), 10000u);
}

TEST(PrefixCache, DemotedPointIsEvictedFirst) {
  PrefixCache<int> cache(3, 1000);
  const Ids turn1 = ids(10), turn2 = cat(turn1, ids(5, 100)), other = ids(8, 300);
  cache.insert(other, std::make_shared<const int>(0), 0);
  cache.insert(turn1, std::make_shared<const int>(1), 0);
  cache.insert(turn2, std::make_shared<const int>(2), 0);
  cache.demote(turn1);  // covered by turn2: goes first, before the older `other`
  cache.insert(ids(4, 600), std::make_shared<const int>(3), 0);
  EXPECT_EQ(cache.find(turn1), nullptr);
  EXPECT_NE(cache.find(other), nullptr);
  EXPECT_NE(cache.find(turn2), nullptr);
  // The index stays consistent after evictions: the longest match of turn1's ids is now none.
  EXPECT_EQ(cache.find_longest(turn1).state, nullptr);
  EXPECT_EQ(cache.tokens(), 8u + 15u + 4u);
}

TEST(PrefixCache, ReportsHowFarBeforeItsEndTheQueryLeftALongerPoint) {
  PrefixCache<int> cache(10, 1000);
  const Ids body = ids(20), prev = cat(body, ids(6, 500));  // body, then a 6-id summary
  cache.insert(ids(12), std::make_shared<const int>(12), 0, PointKind::kCheckpoint);
  cache.insert(Ids(prev.begin(), prev.begin() + 24), std::make_shared<const int>(24), 0,
               PointKind::kTail);
  cache.insert(prev, std::make_shared<const int>(26), 0);
  // The next turn: body, a new line, a new summary. It continues from the checkpoint and left
  // `prev` 6 ids before its end (the inner points it also left do not count: not ends).
  const Ids next = cat(cat(body, ids(4, 800)), ids(6, 600));
  auto m = cache.find_longest(next);
  EXPECT_EQ(m.length, 12u);
  EXPECT_EQ(m.left_before_end, 6u);
  // Ending inside the longer point (a shrinking state) teaches nothing.
  EXPECT_EQ(cache.find_longest(Ids(prev.begin(), prev.begin() + 22)).left_before_end, 0u);
  // Continuing the whole point: nothing left behind.
  EXPECT_EQ(cache.find_longest(cat(prev, ids(3, 900))).left_before_end, 0u);
  // No point matches at all, but one shares ids: still reported.
  PrefixCache<int> other(10, 1000);
  other.insert(prev, std::make_shared<const int>(26), 0);
  m = other.find_longest(next);
  EXPECT_EQ(m.state, nullptr);
  EXPECT_EQ(m.left_before_end, 6u);
}

TEST(PrefixCache, PointKindIsReportedAndAnEndStaysAnEnd) {
  PrefixCache<int> cache(10, 1000);
  cache.insert(ids(8), std::make_shared<const int>(8), 0, PointKind::kCheckpoint);
  EXPECT_EQ(cache.find_longest(ids(9)).kind, PointKind::kCheckpoint);
  cache.insert(ids(8), std::make_shared<const int>(8), 0, PointKind::kTail);
  EXPECT_EQ(cache.find_longest(ids(9)).kind, PointKind::kTail);
  cache.insert(ids(8), std::make_shared<const int>(8), 0);  // also an end of a state now
  EXPECT_EQ(cache.find_longest(ids(9)).kind, PointKind::kEnd);
  cache.insert(ids(8), std::make_shared<const int>(8), 0, PointKind::kCheckpoint);
  EXPECT_EQ(cache.find_longest(ids(9)).kind, PointKind::kEnd);
}

}  // namespace
}  // namespace kev
