// The AVX-VNNI byte kernel ("avxvnni-a8", x86/gemm_avx_vnni.cpp) on a plain C++ emulation of its
// 256-bit instructions, lane by lane after their documented semantics: the same body and pair-of-
// registers operations (bodies/tile512_int8_bytes.inc, bodies/ymm_pair_ops.inc), no target
// attribute, so it runs on any CPU ("avxvnni-a8-emulated"). On a CPU with AVX-VNNI the tests
// compare it with the real kernel, everywhere with the portable one, bit for bit.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "cpu/drivers/precision_variants.h"
#include "cpu/portable/portable.h"

namespace kev::portable {
namespace {

constexpr int64_t kGroup = kInt8Group;  // outputs per packed group

// A ymm register as 8 little-endian dwords (16 words, 32 bytes; lane h = dwords 4h .. 4h + 3) or
// 8 floats.
struct YmmEmuPrims {
  struct I {
    uint32_t l[8];
  };
  struct F {
    float l[8];
  };
  static I zero_i() { return I{}; }
  static F zero_f() { return F{}; }
  static void pin(I&) {}
  static I bcast32(const void* p) {
    uint32_t d;
    std::memcpy(&d, p, 4);
    I r;
    for (auto& v : r.l) v = d;
    return r;
  }
  static I load_i(const void* p) {
    I r;
    std::memcpy(r.l, p, 32);
    return r;
  }
  static void store_i(void* p, I v) { std::memcpy(p, v.l, 32); }
  // vpunpcklwd / vpunpckhwd: in each 128-bit lane h, dword j (j < 4) of the result = word
  // `first + j` of a's lane (low half) and of b's lane (high half); first = 0 (low) or 4 (high).
  static I unpack16(I a, I b, int first) {
    uint16_t wa[16], wb[16];
    std::memcpy(wa, a.l, 32);
    std::memcpy(wb, b.l, 32);
    I r;
    for (int h = 0; h < 2; ++h)
      for (int j = 0; j < 4; ++j)
        r.l[4 * h + j] = uint32_t{wa[8 * h + first + j]} | uint32_t{wb[8 * h + first + j]} << 16;
    return r;
  }
  static I unpacklo16(I a, I b) { return unpack16(a, b, 0); }
  static I unpackhi16(I a, I b) { return unpack16(a, b, 4); }
  // vpdpbusd ymm (AVX-VNNI, no saturation): per dword lane i, acc + the sum over t < 4 of
  // a.byte[4i + t] (unsigned) * b.byte[4i + t] (signed), wrapping modulo 2^32.
  static I dpbusd(I acc, I a, I b) {
    for (int i = 0; i < 8; ++i) {
      int32_t sum = 0;
      for (int t = 0; t < 4; ++t)
        sum += int32_t{static_cast<uint8_t>(a.l[i] >> (8 * t))} *
               int32_t{static_cast<int8_t>(static_cast<uint8_t>(b.l[i] >> (8 * t)))};
      acc.l[i] += static_cast<uint32_t>(sum);
    }
    return acc;
  }
  // vpsubd: per dword, wrapping.
  static I sub_i(I a, I b) {
    for (int i = 0; i < 8; ++i) a.l[i] -= b.l[i];
    return a;
  }
  static F load_f(const float* p) {
    F r;
    std::memcpy(r.l, p, 32);
    return r;
  }
  static void store_f(float* p, F v) { std::memcpy(p, v.l, 32); }
  static F bcast_f(float v) {
    F r;
    for (auto& x : r.l) x = v;
    return r;
  }
  // vperm2f128 with 0x20 / 0x31: a's low (high) 128 bits, then b's low (high) 128 bits.
  static F halves(F a, F b, int first) {
    F r;
    std::memcpy(r.l, a.l + first, 16);
    std::memcpy(r.l + 4, b.l + first, 16);
    return r;
  }
  static F low_halves(F a, F b) { return halves(a, b, 0); }
  static F high_halves(F a, F b) { return halves(a, b, 4); }
  // vcvtdq2ps (MXCSR default: round to nearest even, as C++'s int-to-float conversion).
  static F cvt_f(I v) {
    F r;
    for (int i = 0; i < 8; ++i) r.l[i] = static_cast<float>(static_cast<int32_t>(v.l[i]));
    return r;
  }
  static F mul_f(F a, F b) {
    for (int i = 0; i < 8; ++i) a.l[i] = a.l[i] * b.l[i];
    return a;
  }
  // vfmadd231ps: a * b + c rounded once.
  static F fmadd_f(F a, F b, F c) {
    for (int i = 0; i < 8; ++i) c.l[i] = std::fma(a.l[i], b.l[i], c.l[i]);
    return c;
  }
};

#define KEV_YMM_OPS static
#include "cpu/bodies/ymm_pair_ops.inc"
#undef KEV_YMM_OPS

namespace emu256 {
using V = YmmPairOps<YmmEmuPrims>;
#define KEV_TARGET
#include "cpu/bodies/tile512_int8_bytes.inc"
#undef KEV_TARGET
}  // namespace emu256

}  // namespace

void int8_byte_range_avx_vnni_emulated(const uint8_t* xu, int64_t kp, const float* sx, int64_t rows,
                                       const Int8Matrix& w, float* y, int64_t ldy, int64_t g0,
                                       int64_t g1) {
  emu256::int8_byte_range(xu, kp, sx, rows, w, y, ldy, g0, g1);
}

}  // namespace kev::portable
