// The NEON (aarch64 Advanced SIMD) kernel of the int8 GEMM (private to the model layer; defined
// only when KEV_ARM64, kev/core/kernel_order.h).
//
// Contract: gemm_int8.h's order, bit for bit. The block sums are exact int32 (int16 activation x
// sign-extended int8 weight, widening multiply-accumulate SMLAL / SMLAL2 by element; integer sums
// do not depend on their order, and |isum| <= 32 * 32767 * 127 < 2^31 never overflows), then per
// block in ascending order float(isum) (SCVTF, round to nearest even), sx * sw (FMUL) and one
// fused multiply-add (FMLA, the portable std::fma). SDOT does not fit: it multiplies int8 by int8
// and the activations are int16 (a byte split would need two SDOTs and a correction, and dotprod
// is not part of every ARMv8-A CPU), so this kernel runs on every aarch64 CPU.
// Thread safety: reentrant (writes only its outputs).
#pragma once
#include <cstdint>

#include "kev/model/gemm_int8.h"

namespace kev {

// For gemm_int8.cpp: output groups [g0, g1) of y for quantized activations xq (int16
// [rows][kp], kp = w.blocks * 32) and their scales sx [rows][w.blocks]; reads no row past `rows`.
void int8_range_neon(const int16_t* xq, int64_t kp, const float* sx, int64_t rows,
                     const Int8Matrix& w, float* y, int64_t ldy, int64_t g0, int64_t g1);

}  // namespace kev
