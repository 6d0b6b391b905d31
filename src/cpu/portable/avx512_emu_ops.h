// The few 512-bit operations the AVX-512 precision-mode kernels are written against
// (src/cpu/bodies/tile512_int8.inc, tile512_bf16.inc, tile_amx_int8.inc), in plain C++ following
// each instruction's documented semantics, lane by lane: the kernels' exact code path on any CPU of
// any architecture (tests check each operation against an independent scalar reference, and on
// AVX-512 machines the real kernels against the emulated ones). The intrinsics that implement the
// same operations are src/cpu/x86/avx512_ops.h.
// Register view: I is 512 bits as 16 little-endian dwords (32 int16 or BF16 values, element 2i
// in the low half of dword i), F is 16 floats.
#pragma once
#include <cmath>
#include <cstdint>
#include <cstring>

namespace kev::avx512 {

// The lane-wise operations every emulated register width shares: N dwords (I) or N floats (F),
// each instruction's semantics per lane; N = 16 for the 512-bit kernels below, 8 for the 256-bit
// registers of AVX-VNNI's byte kernel (portable/avx_vnni_emulated.cpp).
template <int N>
struct EmuLanes {
  struct I {
    uint32_t l[N];
  };
  struct F {
    float l[N];
  };
  static I zero_i() { return I{}; }
  static void pin(I&) {}
  static void pin(F&) {}
  // vpbroadcastd.
  static I bcast32(const void* p) {
    uint32_t d;
    std::memcpy(&d, p, 4);
    I r;
    for (auto& v : r.l) v = d;
    return r;
  }
  // vmovdqu32 load.
  static I load_i(const void* p) {
    I r;
    std::memcpy(r.l, p, 4 * N);
    return r;
  }
  // vmovdqu32 store.
  static void store_i(void* p, I v) { std::memcpy(p, v.l, 4 * N); }
  // vpaddd: per dword, wrapping.
  static I add_i(I a, I b) {
    for (int i = 0; i < N; ++i) a.l[i] += b.l[i];
    return a;
  }
  // vpsubd: per dword, wrapping.
  static I sub_i(I a, I b) {
    for (int i = 0; i < N; ++i) a.l[i] -= b.l[i];
    return a;
  }
  // vpdpbusd (AVX512_VNNI and AVX-VNNI, no saturation): per dword lane i, acc + the sum over t < 4
  // of a.byte[4i + t] (unsigned) * b.byte[4i + t] (signed), wrapping modulo 2^32.
  static I dpbusd(I acc, I a, I b) {
    for (int i = 0; i < N; ++i) {
      int32_t sum = 0;
      for (int t = 0; t < 4; ++t)
        sum += int32_t{static_cast<uint8_t>(a.l[i] >> (8 * t))} *
               int32_t{static_cast<int8_t>(static_cast<uint8_t>(b.l[i] >> (8 * t)))};
      acc.l[i] += static_cast<uint32_t>(sum);
    }
    return acc;
  }
  static F zero_f() { return F{}; }
  static F load_f(const float* p) {
    F r;
    std::memcpy(r.l, p, 4 * N);
    return r;
  }
  static F bcast_f(float v) {
    F r;
    for (auto& x : r.l) x = v;
    return r;
  }
  static void store_f(float* p, F v) { std::memcpy(p, v.l, 4 * N); }
  // vcvtdq2ps (MXCSR default: round to nearest even, as C++'s int-to-float conversion).
  static F cvt_f(I v) {
    F r;
    for (int i = 0; i < N; ++i) r.l[i] = static_cast<float>(static_cast<int32_t>(v.l[i]));
    return r;
  }
  static F mul_f(F a, F b) {
    for (int i = 0; i < N; ++i) a.l[i] = a.l[i] * b.l[i];
    return a;
  }
  // vfmadd231ps: a * b + c rounded once.
  static F fmadd_f(F a, F b, F c) {
    for (int i = 0; i < N; ++i) c.l[i] = std::fma(a.l[i], b.l[i], c.l[i]);
    return c;
  }
};

struct EmuOps : EmuLanes<16> {
  static constexpr int kTileGroups = 2;  // the byte kernel's groups per tile, as the real ops

  static int16_t lo16(uint32_t d) { return static_cast<int16_t>(static_cast<uint16_t>(d)); }
  static int16_t hi16(uint32_t d) { return static_cast<int16_t>(static_cast<uint16_t>(d >> 16)); }

  // vpmovsxbw zmm, m256: 32 int8 sign-extended to 32 int16.
  static I widen_i8(const int8_t* p) {
    I r;
    for (int i = 0; i < 16; ++i)
      r.l[i] = static_cast<uint16_t>(int16_t{p[2 * i]}) |
               static_cast<uint32_t>(static_cast<uint16_t>(int16_t{p[2 * i + 1]})) << 16;
    return r;
  }
  // vpslld zmm, zmm, 8: every dword shifted left by 8, the bits shifted out lost.
  static I shl8_dwords(I v) {
    for (auto& d : v.l) d <<= 8;
    return v;
  }
  // vpsllw zmm, zmm, 8: every word shifted left by 8 (its low byte moves up, the high one is lost).
  static I shl8_words(I v) {
    for (auto& d : v.l) d = (d << 8) & 0xff00ff00u;
    return v;
  }
  // vpmovzxbw zmm, m256: 32 uint8 zero-extended to 32 uint16.
  static I widen_u8(const uint8_t* p) {
    I r;
    for (int i = 0; i < 16; ++i) r.l[i] = uint32_t{p[2 * i]} | uint32_t{p[2 * i + 1]} << 16;
    return r;
  }
  // vpermw zmm, idx, zmm with the byte kernel's fixed index: dword j of the result = word j
  // (low half) and word 16 + j (high half) of v.
  static I quads(I v) {
    uint16_t w[32];
    std::memcpy(w, v.l, 64);
    I r;
    for (int j = 0; j < 16; ++j) r.l[j] = uint32_t{w[j]} | uint32_t{w[16 + j]} << 16;
    return r;
  }
  // vpdpwssd (AVX512_VNNI, no saturation): per dword lane i,
  // acc + a.w[2i] * b.w[2i] + a.w[2i+1] * b.w[2i+1], wrapping modulo 2^32.
  static I dpwssd(I acc, I a, I b) {
    for (int i = 0; i < 16; ++i) {
      const int32_t p0 = int32_t{lo16(a.l[i])} * int32_t{lo16(b.l[i])};
      const int32_t p1 = int32_t{hi16(a.l[i])} * int32_t{hi16(b.l[i])};
      // Each product fits in int32; the sums wrap like the hardware's (unsigned arithmetic).
      acc.l[i] = acc.l[i] + static_cast<uint32_t>(p0) + static_cast<uint32_t>(p1);
    }
    return acc;
  }

  // vdpbf16ps after Intel's SDM: per lane i, srcdest += a.bf16[2i+1] * b.bf16[2i+1], then
  // srcdest += a.bf16[2i] * b.bf16[2i], each an FP32 fused multiply-add rounded to nearest
  // even, denormal inputs read as zero, denormal results flushed to (signed) zero, MXCSR
  // ignored. The product of two BF16 values is exact in FP32 and fma rounds the sum once.
  static float daz(float v) {
    return std::fpclassify(v) == FP_SUBNORMAL ? std::copysign(0.0f, v) : v;
  }
  static float bf16_at(uint32_t d, bool high) {
    const uint32_t u = high ? (d & 0xffff0000u) : (d << 16);
    float f;
    std::memcpy(&f, &u, 4);
    return daz(f);
  }
  static float fma_daz_ftz(float a, float b, float c) { return daz(std::fma(a, b, daz(c))); }
  static F dpbf16(F acc, I a, I b) {
    for (int i = 0; i < 16; ++i) {
      float t = fma_daz_ftz(bf16_at(a.l[i], true), bf16_at(b.l[i], true), acc.l[i]);
      acc.l[i] = fma_daz_ftz(bf16_at(a.l[i], false), bf16_at(b.l[i], false), t);
    }
    return acc;
  }
};

}  // namespace kev::avx512
