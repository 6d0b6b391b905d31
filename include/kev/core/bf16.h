// BF16 <-> FP32 conversions with torch's semantics.
// f32_to_bf16 rounds to nearest, ties to even; NaN stays NaN, like
// torch's c10::BFloat16 round_to_nearest_even (every NaN becomes the canonical 0x7FC0).
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

}  // namespace kev
