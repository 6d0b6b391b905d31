// The few 512-bit operations the AVX-512 precision-mode kernels are written against
// (src/cpu/bodies/tile512_int8.inc, tile512_bf16.inc, tile_amx_int8.inc) as intrinsics:
// Avx512VnniOps / Avx512BwOps / Avx512Bf16Ops, each function under the target attribute of exactly
// the extensions it uses; only ever called after the CPU was checked. The same operations in plain
// C++ (the emulation every machine tests with) are src/cpu/portable/avx512_emu_ops.h; the register
// view is the same.
#pragma once
#include <cstdint>
#include <cstring>

#include "cpu/x86/target.h"

namespace kev::avx512 {

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
  KEV_OPS("avx512f") void store_i(void* p, I v) { _mm512_storeu_si512(p, v); }
  KEV_OPS("avx512f") I add_i(I a, I b) { return _mm512_add_epi32(a, b); }
  KEV_OPS("avx512f") I shl8_dwords(I v) { return _mm512_slli_epi32(v, 8); }
  KEV_OPS("avx512f,avx512bw") I shl8_words(I v) { return _mm512_slli_epi16(v, 8); }
  KEV_OPS("avx512f,avx512bw") I widen_u8(const uint8_t* p) {
    return _mm512_cvtepu8_epi16(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
  }
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
  static constexpr int kTileGroups = 2;  // the byte kernel's groups per tile (one zmm each)
  KEV_OPS("avx512f,avx512vnni") I dpwssd(I acc, I a, I b) { return _mm512_dpwssd_epi32(acc, a, b); }
  // The byte kernel's (tile512_int8_bytes.inc): vpdpbusd (unsigned a by signed b, no
  // saturation), vpsubd, and vpermw into quad order: dword j = words j and 16 + j.
  KEV_OPS("avx512f,avx512vnni") I dpbusd(I acc, I a, I b) { return _mm512_dpbusd_epi32(acc, a, b); }
  KEV_OPS("avx512f") I sub_i(I a, I b) { return _mm512_sub_epi32(a, b); }
  KEV_OPS("avx512f,avx512bw") I quads(I v) {
    alignas(64) static constexpr uint16_t kOrder[32] = {0,  16, 1,  17, 2,  18, 3,  19, 4,  20, 5,
                                                        21, 6,  22, 7,  23, 8,  24, 9,  25, 10, 26,
                                                        11, 27, 12, 28, 13, 29, 14, 30, 15, 31};
    return _mm512_permutexvar_epi16(_mm512_load_si512(kOrder), v);
  }
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

}  // namespace kev::avx512
