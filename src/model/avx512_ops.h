// The few 512-bit operations the AVX-512 precision-mode kernels are written against
// (gemm_avx512_int8.inc, gemm_avx512_bf16.inc), in two implementations:
// - EmuOps: plain C++ following each instruction's documented semantics, lane by lane. It runs
//   on any CPU, so a machine without AVX-512 can run the kernels' exact code path; tests check
//   each operation against an independent scalar reference, and on AVX-512 machines the real
//   kernels against the emulated ones.
// - Avx512VnniOps / Avx512BwOps / Avx512Bf16Ops: the intrinsics, each function under the target
//   attribute of exactly the extensions it uses; only ever called after the CPU was checked.
// Register view: I is 512 bits as 16 little-endian dwords (32 int16 or BF16 values, element 2i
// in the low half of dword i), F is 16 floats.
#pragma once
#include <cmath>
#include <cstdint>
#include <cstring>

#include "kev/core/kernel_order.h"

#if KEV_X86
#include <immintrin.h>
#endif

namespace kev::avx512 {

struct EmuOps {
  struct I {
    uint32_t l[16];
  };
  struct F {
    float l[16];
  };

  static int16_t lo16(uint32_t d) { return static_cast<int16_t>(static_cast<uint16_t>(d)); }
  static int16_t hi16(uint32_t d) { return static_cast<int16_t>(static_cast<uint16_t>(d >> 16)); }

  static I zero_i() { return I{}; }
  static void pin(I&) {}
  static void pin(F&) {}
  // vpmovsxbw zmm, m256: 32 int8 sign-extended to 32 int16.
  static I widen_i8(const int8_t* p) {
    I r;
    for (int i = 0; i < 16; ++i)
      r.l[i] = static_cast<uint16_t>(int16_t{p[2 * i]}) |
               static_cast<uint32_t>(static_cast<uint16_t>(int16_t{p[2 * i + 1]})) << 16;
    return r;
  }
  // vpbroadcastd zmm, m32.
  static I bcast32(const void* p) {
    uint32_t d;
    std::memcpy(&d, p, 4);
    I r;
    for (auto& v : r.l) v = d;
    return r;
  }
  // vmovdqu32 zmm, m512.
  static I load_i(const void* p) {
    I r;
    std::memcpy(r.l, p, 64);
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

  static F zero_f() { return F{}; }
  static F load_f(const float* p) {
    F r;
    std::memcpy(r.l, p, 64);
    return r;
  }
  static F bcast_f(float v) {
    F r;
    for (auto& x : r.l) x = v;
    return r;
  }
  static void store_f(float* p, F v) { std::memcpy(p, v.l, 64); }
  // vcvtdq2ps (MXCSR default: round to nearest even, as C++'s int-to-float conversion).
  static F cvt_f(I v) {
    F r;
    for (int i = 0; i < 16; ++i) r.l[i] = static_cast<float>(static_cast<int32_t>(v.l[i]));
    return r;
  }
  static F mul_f(F a, F b) {
    for (int i = 0; i < 16; ++i) a.l[i] = a.l[i] * b.l[i];
    return a;
  }
  // vfmadd231ps: a * b + c rounded once.
  static F fmadd_f(F a, F b, F c) {
    for (int i = 0; i < 16; ++i) c.l[i] = std::fma(a.l[i], b.l[i], c.l[i]);
    return c;
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

#if KEV_X86
#define KEV_OPS(features) static inline __attribute__((always_inline, target(features)))

// The operations every real variant shares (AVX-512 F + BW).
struct Avx512BaseOps {
  using I = __m512i;
  using F = __m512;
  KEV_OPS("avx512f") I zero_i() { return _mm512_setzero_si512(); }
  // An empty asm that holds an accumulator in its register: without it GCC 12 copies every
  // accumulator twice per step of the unrolled tile (as the AVX2 kernel's barrier avoids).
  KEV_OPS("avx512f") void pin(I& v) { __asm__("" : "+v"(v)); }
  KEV_OPS("avx512f") void pin(F& v) { __asm__("" : "+v"(v)); }
  KEV_OPS("avx512f,avx512bw") I widen_i8(const int8_t* p) {
    return _mm512_cvtepi8_epi16(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
  }
  KEV_OPS("avx512f") I bcast32(const void* p) {
    int32_t d;
    std::memcpy(&d, p, 4);
    return _mm512_set1_epi32(d);
  }
  KEV_OPS("avx512f") I load_i(const void* p) { return _mm512_loadu_si512(p); }
  KEV_OPS("avx512f") F zero_f() { return _mm512_setzero_ps(); }
  KEV_OPS("avx512f") F load_f(const float* p) { return _mm512_loadu_ps(p); }
  KEV_OPS("avx512f") F bcast_f(float v) { return _mm512_set1_ps(v); }
  KEV_OPS("avx512f") void store_f(float* p, F v) { _mm512_storeu_ps(p, v); }
  // The zero-masked form: the plain one trips GCC 12's -Wmaybe-uninitialized on its undefined
  // pass-through operand. With every lane selected it is the same vcvtdq2ps.
  KEV_OPS("avx512f") F cvt_f(I v) { return _mm512_maskz_cvtepi32_ps(0xffff, v); }
  KEV_OPS("avx512f") F mul_f(F a, F b) { return _mm512_mul_ps(a, b); }
  KEV_OPS("avx512f") F fmadd_f(F a, F b, F c) { return _mm512_fmadd_ps(a, b, c); }
};

struct Avx512VnniOps : Avx512BaseOps {
  KEV_OPS("avx512f,avx512vnni") I dpwssd(I acc, I a, I b) { return _mm512_dpwssd_epi32(acc, a, b); }
};

// Without VNNI: vpmaddwd then vpaddd. The same number modulo 2^32 as vpdpwssd (vpmaddwd's one
// wrapping case, both pairs -32768 * -32768, wraps to the same bits), so the same kernel output.
struct Avx512BwOps : Avx512BaseOps {
  KEV_OPS("avx512f,avx512bw") I dpwssd(I acc, I a, I b) {
    return _mm512_add_epi32(acc, _mm512_madd_epi16(a, b));
  }
};

struct Avx512Bf16Ops : Avx512BaseOps {
  KEV_OPS("avx512f,avx512bf16") F dpbf16(F acc, I a, I b) {
    return _mm512_dpbf16_ps(acc, (__m512bh)a, (__m512bh)b);
  }
};

#undef KEV_OPS
#endif  // KEV_X86

}  // namespace kev::avx512
