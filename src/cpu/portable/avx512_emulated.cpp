// The AVX-512 precision-mode kernels (precision_kernels.h) on the plain C++ emulation of their
// instructions (avx512_emu_ops.h): the same tile bodies as the real ones, no target attribute,
// so this code can never be compiled into AVX-512 instructions and runs on any CPU.
#include <algorithm>
#include <cstring>
#include <vector>

#include "cpu/drivers/precision_variants.h"
#include "cpu/portable/avx512_emu_ops.h"
#include "cpu/portable/portable.h"

namespace kev::portable {
namespace {

constexpr int64_t kGroup = kInt8Group;  // outputs per packed group (Bf16PairMatrix's too)

namespace emu {
using V = avx512::EmuOps;
#define KEV_TARGET
#include "cpu/bodies/tile512_bf16.inc"
#include "cpu/bodies/tile512_int8.inc"
#include "cpu/bodies/tile512_int8_bytes.inc"
#undef KEV_TARGET
}  // namespace emu

}  // namespace

void int8_range_avx512_emulated(const int16_t* xq, int64_t kp, const float* sx, int64_t rows,
                                const Int8Matrix& w, float* y, int64_t ldy, int64_t g0,
                                int64_t g1) {
  emu::int8_range(xq, kp, sx, rows, w, y, ldy, g0, g1);
}

void int8_byte_range_avx512_emulated(const uint8_t* xu, int64_t kp, const float* sx, int64_t rows,
                                     const Int8Matrix& w, float* y, int64_t ldy, int64_t g0,
                                     int64_t g1) {
  emu::int8_byte_range(xu, kp, sx, rows, w, y, ldy, g0, g1);
}

void bf16_range_avx512_emulated(const uint16_t* xq, int64_t ldxq, int64_t rows,
                                const Bf16PairMatrix& w, float* y, int64_t ldy, int64_t g0,
                                int64_t g1) {
  emu::bf16_range(xq, ldxq, rows, w, y, ldy, g0, g1);
}

}  // namespace kev::portable
