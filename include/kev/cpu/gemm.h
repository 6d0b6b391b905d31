// BF16-weight x FP32-activation matrix products for the CPU forward.
//
// gemm_bf16: y[m, n] = sum_k x[m, k] * float(W[n, k]) for m < rows, n < W.rows, k < W.cols.
// Order of operations (fixed, so results are reproducible): every output keeps 16 partial sums,
// lane l accumulating k = l, l+16, l+32, ... with a fused multiply-add per step; the 16 lanes
// are then added in the fixed tree (l, l+8), (l, l+4), (l, l+2), (0, 1). This depends on K
// only, so an output never depends on how many rows are in the batch, how work is split
// across threads, or which instruction set ran: the AVX-512, AVX2, NEON and scalar paths are
// bitwise identical (tests check it). Activations stay FP32 (no BF16 rounding of x).
#pragma once
#include <cstddef>
#include <cstdint>

#include "kev/cpu/isa.h"
#include "kev/cpu/matrix.h"

namespace kev {

// The variant gemm_bf16 runs: the best this CPU supports, capped by KEV_GEMM_ISA / KEV_ISA
// (kev/cpu/isa.h); read once per process.
Isa best_gemm_isa();

// x: rows x K with row stride ldx; y: rows x N with row stride ldy. threads 0 = default_workers().
void gemm_bf16(const float* x, int64_t rows, int64_t ldx, const Bf16Matrix& w, float* y,
               int64_t ldy, size_t threads = 0);
// isa must be supported by this CPU (isa_supported).
void gemm_bf16_isa(Isa isa, const float* x, int64_t rows, int64_t ldx, const Bf16Matrix& w,
                   float* y, int64_t ldy, size_t threads);

}  // namespace kev
