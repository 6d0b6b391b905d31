// The matrix types the kernel layer reads: plain data, no behaviour. The model owns where they
// come from (weights.h maps Bf16Matrix from a bundle; the int8 and bf16 precision modes pack
// Int8Matrix and Bf16PairMatrix at load time through gemm_int8.h and precision_kernels.h).
//
// Contract: a Bf16Matrix views memory it does not own (row-major, possibly unaligned); the packed
// matrices own their bytes (move-only) and have one layout on every CPU, so packing never
// depends on the kernel that will read it.
#pragma once
#include <cstddef>
#include <cstdint>
#include <vector>

#include "kev/core/aligned.h"

namespace kev {

// Row-major [rows, cols] BF16 matrix inside a mapping; may be unaligned.
struct Bf16Matrix {
  const uint16_t* data = nullptr;
  int64_t rows = 0, cols = 0;
};

constexpr int64_t kQuantBlock = 32;  // k values per int8 quantization block (gemm_int8.h)
constexpr int64_t kInt8Group = 16;   // outputs per packed group of Int8Matrix and Bf16PairMatrix
constexpr int64_t kFittedSuperBlock = 8;  // blocks per q4z / q5z super-block (one F16 scale)
constexpr int64_t kQ4zBlockBytes = 18;    // a q4z block: 16 bytes of nibbles, sc, z
constexpr int64_t kQ5zBlockBytes = 22;    // a q5z block: q5's 20 bytes, sc, z

// A quantized [rows, cols] matrix, packed for the kernels: outputs in groups of 16 (the last
// zero-padded), per group [block][pair of k][16 outputs][2] int8, scales [group][block][16].
// (The packed matrices' arrays are ZeroedBuffers: the packing threads write them from zero
// without a serial fill pass first.)
struct Int8Matrix {
  int64_t rows = 0, cols = 0, blocks = 0, groups = 0;
  ZeroedBuffer<int8_t> q;
  ZeroedBuffer<float> scale;
  size_t bytes() const { return q.size() + scale.size() * sizeof(float); }
};

// A 4-bit or 5-bit quantized [rows, cols] matrix (a q4, q5, q4z or q5z bundle's weights,
// gemm_int8.h):
// Int8Matrix's layout with each pair of k in one byte (the low 4 bits of the even k in the low
// nibble, of the odd k in the high): per group [block][pair of k][16 outputs] bytes; for q5 the
// fifth bits beside them, [group][block][16 outputs] words, bit k of a word = bit 4 of value k
// (empty for q4, whose values are 4-bit two's complement in [-8, 7]; q5's are 5-bit in [-16,
// 15]); scales as stored, F16 bits, [group][block][16]. The fitted kinds q4z and q5z: the same
// values (t in [-8, 7] or [-16, 15]), `scale` holds each block's sc | z << 8 (z as int8) and
// `super` the F16 super-block scales d, [group][super-block][16]. The kernels unpack a chunk of
// groups to Int8Matrix's layout (a byte becomes the two int8 of its pair, in place order; q4z's t
// becomes 8 t + z at scale d sc / 8, q5z's 4 t + z at d sc / 4) and run the int8 tiles on it.
struct Int4Matrix {
  int64_t rows = 0, cols = 0, blocks = 0, groups = 0;
  ZeroedBuffer<uint8_t> q;
  ZeroedBuffer<uint32_t> high;  // q5 and q5z only
  ZeroedBuffer<uint16_t> scale;
  ZeroedBuffer<uint16_t> super;  // q4z and q5z only
  size_t bytes() const {
    return q.size() + high.size() * sizeof(uint32_t) +
           (scale.size() + super.size()) * sizeof(uint16_t);
  }
};

// A BF16 [rows, cols] matrix in vdpbf16ps's pair layout: outputs in groups of 16 (the last
// zero-padded), k in pairs (cols rounded up to even, zero-padded), per group [pair][16 outputs][2].
struct Bf16PairMatrix {
  int64_t rows = 0, cols = 0, pairs = 0, groups = 0;
  ZeroedBuffer<uint16_t> w;
  size_t bytes() const { return w.size() * sizeof(uint16_t); }
};

}  // namespace kev
