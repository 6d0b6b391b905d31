// Int8Matrix's packed layout (kev/cpu/matrix.h), shared by the packing (gemm_int8.cpp) and the
// kernels that read it. Private to the kernel layer.
#pragma once
#include <cstdint>

#include "kev/cpu/matrix.h"

namespace kev::int8_layout {

constexpr int64_t kGroup = kInt8Group;       // outputs per packed group
constexpr int64_t kPairs = kQuantBlock / 2;  // pairs of k per block

// Offset of weight (output j of group g, k) inside the packed data: per group
// [block][pair][16 outputs][2], so a block's 16 pairs of one output lie 32 bytes apart.
inline int64_t packed_offset(int64_t blocks, int64_t g, int64_t j, int64_t k) {
  const int64_t b = k / kQuantBlock, s = (k % kQuantBlock) / 2, e = k % 2;
  return ((g * blocks + b) * kPairs + s) * kGroup * 2 + j * 2 + e;
}

}  // namespace kev::int8_layout
