#include <gtest/gtest.h>

#include <numeric>
#include <vector>

#include "kev/core/py_random.h"

namespace kev {
namespace {

std::vector<int> iota(int n) {
  std::vector<int> v(static_cast<size_t>(n));
  std::iota(v.begin(), v.end(), 0);
  return v;
}

// Expected values printed by CPython 3: r = random.Random(seed); r.shuffle(x); r.shuffle(y).
TEST(PyRandom, ShuffleMatchesCPython) {
  struct Case {
    uint64_t seed;
    std::vector<int> ten, three;
  };
  const Case cases[] = {
      {0, {7, 8, 1, 5, 3, 4, 2, 0, 9, 6}, {2, 0, 1}},
      {1, {6, 8, 9, 7, 5, 3, 0, 4, 1, 2}, {1, 2, 0}},
      {4294967296ULL, {8, 9, 3, 2, 4, 7, 0, 6, 5, 1}, {1, 2, 0}},
      {18446744073709551615ULL, {2, 6, 7, 9, 8, 1, 4, 5, 3, 0}, {1, 0, 2}},
  };
  for (const Case& c : cases) {
    PyRandom r(c.seed);
    std::vector<int> ten = iota(10), three = iota(3);
    r.shuffle(ten);
    r.shuffle(three);
    EXPECT_EQ(ten, c.ten) << c.seed;
    EXPECT_EQ(three, c.three) << c.seed;
  }
}

TEST(PyRandom, GetrandbitsMatchesCPython) {
  PyRandom r(5);  // random.Random(5).getrandbits(32), three times
  EXPECT_EQ(r.getrandbits(32), 2675342405U);
  EXPECT_EQ(r.getrandbits(32), 1097127993U);
  EXPECT_EQ(r.getrandbits(32), 3185950873U);
}

}  // namespace
}  // namespace kev
