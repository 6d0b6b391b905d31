// The AMX kernels: int8 (precision_kernels.h's int8 contract, bit for bit) and the AMX-BF16 dot
// kernel of the bf16 mode. The shared bodies (src/cpu/bodies/tile_amx_int8.inc, tile_amx_bf16.inc)
// instantiated on the AMX instructions (with AVX-512 for the int8 scaling), and on the plain C++
// emulation of both (any CPU; what tests use where the CPU has no AMX). The x86 family registers
// them (x86/gemm_int8.cpp, x86/gemm_avx512.cpp).
#include <algorithm>
#include <cstring>
#include <vector>

#include "cpu/drivers/precision_variants.h"
#include "cpu/portable/amx_emu_ops.h"
#include "cpu/portable/avx512_emu_ops.h"
#include "cpu/x86/amx_ops.h"
#include "cpu/x86/avx512_ops.h"
#include "cpu/x86/precision.h"

namespace kev::x86 {
namespace {

constexpr int64_t kGroup = kInt8Group;  // outputs per packed group

namespace real {
using T = amx::AmxTileOps;
using V = avx512::Avx512BaseOps;
#define KEV_TARGET __attribute__((target("avx512f,avx512bw")))
#include "cpu/bodies/tile_amx_int8.inc"
// after the int8 body: shares its tile constants and configuration
#include "cpu/bodies/tile_amx_bf16.inc"
#undef KEV_TARGET
}  // namespace real

namespace emulated {
using T = amx::EmuTileOps;
using V = avx512::EmuOps;
#define KEV_TARGET
#include "cpu/bodies/tile_amx_int8.inc"
// after the int8 body: shares its tile constants and configuration
#include "cpu/bodies/tile_amx_bf16.inc"
#undef KEV_TARGET
}  // namespace emulated

}  // namespace

void int8_range_amx(const int16_t* xq, int64_t kp, const float* sx, int64_t rows,
                    const Int8Matrix& w, float* y, int64_t ldy, int64_t g0, int64_t g1) {
  real::int8_range(xq, kp, sx, rows, w, y, ldy, g0, g1);
}

void int8_range_amx_emulated(const int16_t* xq, int64_t kp, const float* sx, int64_t rows,
                             const Int8Matrix& w, float* y, int64_t ldy, int64_t g0, int64_t g1) {
  emulated::int8_range(xq, kp, sx, rows, w, y, ldy, g0, g1);
}

void bf16_range_amx(const uint16_t* xq, int64_t ldxq, int64_t rows, const Bf16PairMatrix& w,
                    float* y, int64_t ldy, int64_t g0, int64_t g1) {
  real::bf16_range(xq, ldxq, rows, w, y, ldy, g0, g1);
}

void bf16_range_amx_emulated(const uint16_t* xq, int64_t ldxq, int64_t rows,
                             const Bf16PairMatrix& w, float* y, int64_t ldy, int64_t g0,
                             int64_t g1) {
  emulated::bf16_range(xq, ldxq, rows, w, y, ldy, g0, g1);
}

}  // namespace kev::x86
