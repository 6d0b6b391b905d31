#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <random>
#include <thread>
#include <utility>
#include <vector>

#include "kev/core/bf16.h"
#include "kev/core/error.h"
#include "kev/core/file.h"
#include "kev/core/sha256.h"
#include "kev/core/threads.h"

namespace kev {
namespace {

// FIPS 180-2 test vectors.
TEST(Sha256, KnownVectors) {
  EXPECT_EQ(sha256_hex(""), "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  EXPECT_EQ(sha256_hex("abc"), "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  Sha256 h;
  std::string a(1000, 'a');
  for (int i = 0; i < 1000; ++i) h.update(a.data(), a.size());
  EXPECT_EQ(h.hex(), "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0");
}

// Oracle: the two bf16 neighbours of x evaluated in double; nearest wins, ties go to the
// even mantissa.
uint16_t bf16_by_double(float x) {
  uint32_t u;
  std::memcpy(&u, &x, 4);
  uint16_t lo = static_cast<uint16_t>(u >> 16);
  uint16_t hi = static_cast<uint16_t>(lo + 1);
  double dlo = std::fabs(double(bf16_to_f32(lo)) - double(x));
  double dhi = std::isinf(bf16_to_f32(hi)) && !std::isinf(x)
                   ? std::fabs(std::ldexp(1.0, 128) * (std::signbit(x) ? -1 : 1) - double(x))
                   : std::fabs(double(bf16_to_f32(hi)) - double(x));
  if ((u & 0xffff) == 0) return lo;
  if (dlo < dhi) return lo;
  if (dhi < dlo) return hi;
  return (lo & 1) ? hi : lo;
}

TEST(Bf16, RoundsToNearestEvenLikeDoubleOracle) {
  std::mt19937 rng(7);
  std::uniform_int_distribution<uint32_t> bits;
  for (int i = 0; i < 200000; ++i) {
    uint32_t u = bits(rng);
    if (i % 4 == 0) u = (u & 0xffff0000u) | 0x8000u;  // exact ties
    float f;
    std::memcpy(&f, &u, 4);
    if (std::isnan(f)) {
      EXPECT_EQ(f32_to_bf16(f), 0x7fc0);
      continue;
    }
    ASSERT_EQ(f32_to_bf16(f), bf16_by_double(f)) << "bits " << std::hex << u;
  }
}

// F16 from its fields by the IEEE 754 binary16 definition, in double (exact).
double f16_value(uint16_t h) {
  const int sign = (h >> 15) ? -1 : 1, exp = (h >> 10) & 0x1f, man = h & 0x3ff;
  if (exp == 0) return sign * std::ldexp(man, -24);
  if (exp == 31) return man ? std::nan("") : sign * INFINITY;
  return sign * std::ldexp(1024 + man, exp - 25);
}

TEST(F16, WidensEveryValueExactly) {
  for (uint32_t h = 0; h < 65536; ++h) {
    const double want = f16_value(static_cast<uint16_t>(h));
    const float got = f16_to_f32(static_cast<uint16_t>(h));
    if (std::isnan(want)) {
      ASSERT_TRUE(std::isnan(got)) << h;
      continue;
    }
    ASSERT_EQ(static_cast<double>(got), want) << h;
    ASSERT_EQ(std::signbit(got), (h >> 15) != 0) << h;
  }
}

// The nearest F16 to f by search over every finite F16 value in double, ties to the even
// pattern; beyond the largest finite value, infinity from the midpoint 65520 up (IEEE 754).
uint16_t f16_by_search(float f) {
  static const std::vector<std::pair<double, uint16_t>> values = [] {
    std::vector<std::pair<double, uint16_t>> v;
    for (uint32_t h = 0; h < 0x7c00; ++h) v.push_back({f16_value(static_cast<uint16_t>(h)), h});
    return v;
  }();
  const uint16_t sign = std::signbit(f) ? 0x8000 : 0;
  const double a = std::fabs(static_cast<double>(f));
  if (a >= 65520.0) return sign | 0x7c00;
  auto it = std::lower_bound(values.begin(), values.end(), std::make_pair(a, uint16_t{0}));
  if (it == values.end()) return sign | 0x7bff;
  if (it->first == a || it == values.begin()) return sign | it->second;
  const auto below = *(it - 1), above = *it;
  const double dlo = a - below.first, dhi = above.first - a;
  if (dlo < dhi) return sign | below.second;
  if (dhi < dlo) return sign | above.second;
  return sign | ((below.second & 1) ? above.second : below.second);
}

TEST(F16, RoundsToNearestEvenLikeSearchOracle) {
  std::mt19937 rng(11);
  std::uniform_int_distribution<uint32_t> bits;
  std::uniform_int_distribution<uint32_t> exps(98, 145);  // around the F16 range, subnormals too
  for (int i = 0; i < 300000; ++i) {
    uint32_t u = bits(rng);
    if (i % 2 == 0) u = (u & 0x807fffffu) | (exps(rng) << 23);
    if (i % 8 == 0) u = (u & 0xffffe000u) | 0x1000u;  // normal-range ties
    float f;
    std::memcpy(&f, &u, 4);
    if (std::isnan(f)) {
      ASSERT_EQ(f32_to_f16(f), 0x7e00);
      continue;
    }
    ASSERT_EQ(f32_to_f16(f), f16_by_search(f)) << "bits " << std::hex << u;
  }
  // Every F16 value and every midpoint between neighbours (the ties of the subnormal range too).
  for (uint32_t h = 0; h < 0x7c00; ++h) {
    const float f = static_cast<float>(f16_value(static_cast<uint16_t>(h)));
    ASSERT_EQ(f32_to_f16(f), h);
    ASSERT_EQ(f32_to_f16(-f), h | 0x8000u);
    const float mid = static_cast<float>(
        (f16_value(static_cast<uint16_t>(h)) + f16_value(static_cast<uint16_t>(h + 1))) / 2);
    ASSERT_EQ(f32_to_f16(mid), f16_by_search(mid)) << h;
  }
  EXPECT_EQ(f32_to_f16(INFINITY), 0x7c00);
  EXPECT_EQ(f32_to_f16(65519.0f), 0x7bff);
  EXPECT_EQ(f32_to_f16(65520.0f), 0x7c00);
}

TEST(Threads, ParallelForVisitsEachIndexOnceAndRethrows) {
  std::vector<std::atomic<int>> hits(1000);
  parallel_for(
      hits.size(), [&](size_t i) { hits[i]++; }, 2);
  for (auto& h : hits) EXPECT_EQ(h.load(), 1);
  EXPECT_THROW(parallel_for(
                   100,
                   [](size_t i) {
                     if (i == 50) fail(ErrorKind::kBadInput, "x");
                   },
                   2),
               Error);
}

TEST(Threads, NestedAndConcurrentCallersComplete) {
  std::atomic<int> total{0};
  auto outer = [&](size_t) {
    parallel_for(
        10, [&](size_t) { total++; }, 2);  // nested: runs inline on pool threads
  };
  std::thread a([&] { parallel_for(20, outer, 2); });
  std::thread b([&] { parallel_for(20, outer, 2); });  // pool busy: runs on its own thread
  a.join();
  b.join();
  EXPECT_EQ(total.load(), 400);
  for (int round = 0; round < 200; ++round) {  // many small jobs reuse the same workers
    std::atomic<int> hits{0};
    parallel_for(
        3, [&](size_t) { hits++; }, 2);
    ASSERT_EQ(hits.load(), 3);
  }
}

TEST(StagingDir, RemovedUnlessPublishedAndRefusesExisting) {
  std::string base = testing::TempDir() + "/kev_staging_" + std::to_string(::getpid());
  remove_tree(base);
  std::string dest = base + "_out";
  remove_tree(dest);
  std::string staged;
  {
    StagingDir s(dest);
    staged = s.path();
    write_file_synced(s.file("a"), "hello");
    EXPECT_TRUE(path_exists(staged + "/a"));
  }
  EXPECT_FALSE(path_exists(staged));
  EXPECT_FALSE(path_exists(dest));
  {
    StagingDir s(dest);
    write_file_synced(s.file("a"), "hello");
    s.publish();
  }
  EXPECT_EQ(read_file(dest + "/a"), "hello");
  try {
    StagingDir again(dest);
    FAIL() << "existing output accepted";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kBadInput);
  }
  remove_tree(dest);
}

TEST(WriteFaults, InjectedFailureIsAnIoError) {
  std::string path = testing::TempDir() + "/kev_fault_" + std::to_string(::getpid());
  remove_tree(path);
  WriteFaults::fail_after_bytes(10);
  OutputFile f(path);
  f.write("12345", 5);
  try {
    f.write("1234567890", 10);
    FAIL() << "write past the budget succeeded";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kIo);
  }
  WriteFaults::fail_after_bytes(UINT64_MAX);
  remove_tree(path);
}

}  // namespace
}  // namespace kev
