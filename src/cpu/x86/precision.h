// The AVX-512 precision-mode kernels of the x86-64 family (x86/gemm_avx512.cpp, x86/gemm_amx.cpp),
// for the family's kernel choice (x86/gemm_int8.cpp, x86/gemm_avx512.cpp). Private to src/cpu/x86/.
#pragma once
#include <cstdint>

#include "cpu/arch.h"

namespace kev::x86 {

// arch::Int8Range through vpdpwssd (AVX512_VNNI) or vpmaddwd + vpaddd (AVX-512 BW).
void int8_range_avx512_vnni(const int16_t* xq, int64_t kp, const float* sx, int64_t rows,
                            const Int8Matrix& w, float* y, int64_t ldy, int64_t g0, int64_t g1);
// arch::Int8ByteRange through vpdpbusd (AVX512_VNNI; 8-bit activations only).
void int8_byte_range_avx512_vnni(const uint8_t* xu, int64_t kp, const float* sx, int64_t rows,
                                 const Int8Matrix& w, float* y, int64_t ldy, int64_t g0,
                                 int64_t g1);
// arch::Int8ByteRange through ymm vpdpbusd (AVX-VNNI; 8-bit activations only;
// x86/gemm_avx_vnni.cpp).
void int8_byte_range_avx_vnni(const uint8_t* xu, int64_t kp, const float* sx, int64_t rows,
                              const Int8Matrix& w, float* y, int64_t ldy, int64_t g0, int64_t g1);
void int8_range_avx512_bw(const int16_t* xq, int64_t kp, const float* sx, int64_t rows,
                          const Int8Matrix& w, float* y, int64_t ldy, int64_t g0, int64_t g1);
// arch::Int8Range through AMX tiles (tdpbusd + tdpbssd on the int16 activations' two bytes;
// x86/gemm_amx.cpp), and the same on the plain C++ emulation of the tiles (any CPU).
void int8_range_amx(const int16_t* xq, int64_t kp, const float* sx, int64_t rows,
                    const Int8Matrix& w, float* y, int64_t ldy, int64_t g0, int64_t g1);
void int8_range_amx_emulated(const int16_t* xq, int64_t kp, const float* sx, int64_t rows,
                             const Int8Matrix& w, float* y, int64_t ldy, int64_t g0, int64_t g1);
// arch::Bf16Range through AMX-BF16 tiles (tdpbf16ps; its own order, x86/gemm_amx.cpp), and the
// same on the plain C++ emulation of the tiles (any CPU).
void bf16_range_amx(const uint16_t* xq, int64_t ldxq, int64_t rows, const Bf16PairMatrix& w,
                    float* y, int64_t ldy, int64_t g0, int64_t g1);
void bf16_range_amx_emulated(const uint16_t* xq, int64_t ldxq, int64_t rows,
                             const Bf16PairMatrix& w, float* y, int64_t ldy, int64_t g0,
                             int64_t g1);
// arch::Bf16Range through vdpbf16ps (AVX512_BF16).
void bf16_range_avx512(const uint16_t* xq, int64_t ldxq, int64_t rows, const Bf16PairMatrix& w,
                       float* y, int64_t ldy, int64_t g0, int64_t g1);

}  // namespace kev::x86
