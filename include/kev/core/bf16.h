// BF16 <-> FP32 conversions with torch's semantics, and IEEE binary16 (F16) <-> FP32.
// f32_to_bf16 rounds to nearest, ties to even; NaN stays NaN, like
// torch's c10::BFloat16 round_to_nearest_even (every NaN becomes the canonical 0x7FC0).
// f16_to_f32 is exact (subnormals included); f32_to_f16 rounds to nearest, ties to even, as
// IEEE 754 and numpy's float16 do: overflow gives infinity, NaN the canonical 0x7E00. Plain
// integer code, so the same bits on every CPU.
#pragma once
#include <cstdint>
#include <cstring>

namespace kev {

inline float bf16_to_f32(uint16_t b) {
  uint32_t u = static_cast<uint32_t>(b) << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

inline uint16_t f32_to_bf16(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  if ((u & 0x7fffffffu) > 0x7f800000u) return 0x7fc0u;
  uint32_t rounding_bias = 0x7fffu + ((u >> 16) & 1u);
  return static_cast<uint16_t>((u + rounding_bias) >> 16);
}

inline float f16_to_f32(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  const uint32_t exp = (h >> 10) & 0x1fu, man = h & 0x3ffu;
  uint32_t u;
  if (exp == 0x1fu) {
    u = sign | 0x7f800000u | (man << 13);  // infinity or NaN
  } else if (exp != 0) {
    u = sign | ((exp + 112u) << 23) | (man << 13);  // normal: rebias 15 -> 127
  } else if (man == 0) {
    u = sign;  // signed zero
  } else {     // subnormal: man * 2^-24, exact in binary32
    int e = 0;
    uint32_t m = man;
    while (!(m & 0x400u)) {
      m <<= 1;
      ++e;
    }
    u = sign | ((113u - static_cast<uint32_t>(e)) << 23) | ((m & 0x3ffu) << 13);
  }
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

inline uint16_t f32_to_f16(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  const uint16_t sign = static_cast<uint16_t>((u >> 16) & 0x8000u);
  const uint32_t a = u & 0x7fffffffu;
  if (a > 0x7f800000u) return 0x7e00u;                       // NaN
  if (a >= 0x477ff000u) return sign | 0x7c00u;               // rounds to >= 2^16: infinity
  if (a >= 0x38800000u) {                                    // normal in binary16 (>= 2^-14)
    const uint32_t rounded = a + 0xfffu + ((a >> 13) & 1u);  // ties to even on bit 13
    return sign | static_cast<uint16_t>((rounded - 0x38000000u) >> 13);
  }
  if (a < 0x33000000u) return sign;  // below half the least subnormal (2^-25): zero
  // Subnormal: value = man * 2^-24; shift the 24-bit significand into place, ties to even.
  const uint32_t exp = a >> 23, sig = (a & 0x7fffffu) | 0x800000u;
  const uint32_t shift = 126u - exp;  // 14..24 here
  const uint32_t q = sig >> shift, rem = sig & ((1u << shift) - 1u), half = 1u << (shift - 1u);
  const uint32_t r = q + ((rem > half || (rem == half && (q & 1u))) ? 1u : 0u);
  return sign | static_cast<uint16_t>(r);
}

}  // namespace kev
