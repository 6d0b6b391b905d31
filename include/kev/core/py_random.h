// PyRandom: CPython's `random.Random(seed)` for integer seeds, as far as `shuffle` needs it, so
// that a native server reproduces the option orders an upstream Python server draws
// (POST /v1/systemone/permute). MT19937 seeded by init_by_array with the seed's absolute value
// split into 32-bit words (least significant first; one word 0 for seed 0), getrandbits(k) for
// k <= 32 as the top k bits of one draw, _randbelow(n) by rejection on n.bit_length() bits, and
// shuffle as Fisher-Yates from the last element down. Checked against Python itself in the
// permute tests (tests/integration/test_serve_compat.py).
#pragma once
#include <array>
#include <cstddef>
#include <cstdint>
#include <utility>
#include <vector>

namespace kev {

class PyRandom {
 public:
  explicit PyRandom(uint64_t abs_seed);

  uint32_t next_u32();
  uint32_t getrandbits(int k);  // 1 <= k <= 32
  size_t randbelow(size_t n);   // 1 <= n < 2^32

  template <typename T>
  void shuffle(std::vector<T>& x) {
    for (size_t i = x.size(); i-- > 1;) std::swap(x[i], x[randbelow(i + 1)]);
  }

 private:
  static constexpr int kN = 624;
  std::array<uint32_t, kN> mt_{};
  int index_ = kN;
};

}  // namespace kev
