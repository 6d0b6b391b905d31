#include "kev/core/py_random.h"

#include <algorithm>
#include <bit>

namespace kev {

PyRandom::PyRandom(uint64_t abs_seed) {
  // init_genrand(19650218), then init_by_array(key) (Matsumoto and Nishimura's reference code,
  // as CPython's _randommodule.c uses it).
  std::vector<uint32_t> key;
  for (uint64_t n = abs_seed; n != 0; n >>= 32) key.push_back(static_cast<uint32_t>(n));
  if (key.empty()) key.push_back(0);
  mt_[0] = 19650218U;
  for (int i = 1; i < kN; ++i)
    mt_[i] = 1812433253U * (mt_[i - 1] ^ (mt_[i - 1] >> 30)) + static_cast<uint32_t>(i);
  int i = 1;
  size_t j = 0;
  for (size_t k = std::max<size_t>(kN, key.size()); k > 0; --k) {
    mt_[i] = (mt_[i] ^ ((mt_[i - 1] ^ (mt_[i - 1] >> 30)) * 1664525U)) + key[j] +
             static_cast<uint32_t>(j);
    ++i;
    ++j;
    if (i >= kN) {
      mt_[0] = mt_[kN - 1];
      i = 1;
    }
    if (j >= key.size()) j = 0;
  }
  for (int k = kN - 1; k > 0; --k) {
    mt_[i] =
        (mt_[i] ^ ((mt_[i - 1] ^ (mt_[i - 1] >> 30)) * 1566083941U)) - static_cast<uint32_t>(i);
    ++i;
    if (i >= kN) {
      mt_[0] = mt_[kN - 1];
      i = 1;
    }
  }
  mt_[0] = 0x80000000U;
  index_ = kN;
}

uint32_t PyRandom::next_u32() {
  constexpr uint32_t kUpper = 0x80000000U, kLower = 0x7fffffffU, kMatrix = 0x9908b0dfU;
  if (index_ >= kN) {
    for (int k = 0; k < kN; ++k) {
      const uint32_t y = (mt_[k] & kUpper) | (mt_[(k + 1) % kN] & kLower);
      mt_[k] = mt_[(k + 397) % kN] ^ (y >> 1) ^ ((y & 1U) ? kMatrix : 0U);
    }
    index_ = 0;
  }
  uint32_t y = mt_[index_++];
  y ^= y >> 11;
  y ^= (y << 7) & 0x9d2c5680U;
  y ^= (y << 15) & 0xefc60000U;
  y ^= y >> 18;
  return y;
}

uint32_t PyRandom::getrandbits(int k) {
  return next_u32() >> (32 - k);
}

size_t PyRandom::randbelow(size_t n) {
  const int k = std::bit_width(n);
  size_t r = getrandbits(k);
  while (r >= n) r = getrandbits(k);
  return r;
}

}  // namespace kev
