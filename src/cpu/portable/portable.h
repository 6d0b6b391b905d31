// The portable variant of every kernel family: plain C++ in each family's reference order
// (gemm.h, gemm_int8.h, precision_kernels.h, vec.h, merge.h, pointer_head.h). Always built, on
// every architecture; it is what a level without a family variant runs, and what every other
// variant must match bit for bit. Private to the kernel layer.
#pragma once
#include <cstdint>

#include "cpu/arch.h"

namespace kev::portable {

const arch::GemmVariant& gemm();

// gemm_int8.h's reference order, rows unpadded (an arch::Int8Range).
void int8_range(const int16_t* xq, int64_t kp, const float* sx, int64_t rows, const Int8Matrix& w,
                float* y, int64_t ldy, int64_t g0, int64_t g1);

// The AVX-512 precision-mode kernels run on a plain C++ emulation of their instructions
// (avx512_emu_ops.h): what machines without AVX-512, or of another architecture, test them with.
void int8_range_avx512_emulated(const int16_t* xq, int64_t kp, const float* sx, int64_t rows,
                                const Int8Matrix& w, float* y, int64_t ldy, int64_t g0, int64_t g1);
// The byte kernel ("avx512vnni-a8") on the same emulation (an arch::Int8ByteRange).
void int8_byte_range_avx512_emulated(const uint8_t* xu, int64_t kp, const float* sx, int64_t rows,
                                     const Int8Matrix& w, float* y, int64_t ldy, int64_t g0,
                                     int64_t g1);
// The AVX-VNNI byte kernel ("avxvnni-a8") on the emulation of its 256-bit instructions
// (portable/avx_vnni_emulated.cpp).
void int8_byte_range_avx_vnni_emulated(const uint8_t* xu, int64_t kp, const float* sx, int64_t rows,
                                       const Int8Matrix& w, float* y, int64_t ldy, int64_t g0,
                                       int64_t g1);
void bf16_range_avx512_emulated(const uint16_t* xq, int64_t ldxq, int64_t rows,
                                const Bf16PairMatrix& w, float* y, int64_t ldy, int64_t g0,
                                int64_t g1);

// merge.h's order for rows [0, rows) (an arch::MergeRows), and for columns [j0, cols) of one row
// (the tail every vector variant ends its rows with).
void merge_rows(const uint8_t* w, const float* b, const float* a, int64_t rank, int64_t cols,
                float scale, int64_t rows, uint8_t* out);
void merge_columns(const uint8_t* w_row, const float* b_row, const float* a, int64_t rank,
                   int64_t cols, float scale, int64_t j0, uint8_t* out_row);

const head_kernels::KernelSet& head();

}  // namespace kev::portable
