// The AVX-VNNI byte kernel ("avxvnni-a8", x86/gemm_avx_vnni.cpp) on a plain C++ emulation of its
// 256-bit instructions, lane by lane after their documented semantics: the same body and pair-of-
// registers operations (bodies/tile512_int8_bytes.inc, bodies/ymm_pair_ops.inc), no target
// attribute, so it runs on any CPU ("avxvnni-a8-emulated"). On a CPU with AVX-VNNI the tests
// compare it with the real kernel, everywhere with the portable one, bit for bit.
#include <algorithm>
#include <cstring>
#include <vector>

#include "cpu/drivers/precision_variants.h"
#include "cpu/portable/avx512_emu_ops.h"
#include "cpu/portable/portable.h"

namespace kev::portable {
namespace {

constexpr int64_t kGroup = kInt8Group;  // outputs per packed group

// A ymm register as 8 little-endian dwords (16 words, 32 bytes; lane h = dwords 4h .. 4h + 3) or
// 8 floats: the lane-wise operations of avx512_emu_ops.h, and the two that cross lanes.
struct YmmEmuPrims : avx512::EmuLanes<8> {
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
  // vperm2f128 with 0x20 / 0x31: a's low (high) 128 bits, then b's low (high) 128 bits.
  static F halves(F a, F b, int first) {
    F r;
    std::memcpy(r.l, a.l + first, 16);
    std::memcpy(r.l + 4, b.l + first, 16);
    return r;
  }
  static F low_halves(F a, F b) { return halves(a, b, 0); }
  static F high_halves(F a, F b) { return halves(a, b, 4); }
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
