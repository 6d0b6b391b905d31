// AVX-512 kernels of the fast precision modes (`--precision int8`), each also built as a
// portable emulation so that machines without AVX-512 can test the kernel.
//
// Contract:
// - int8 (Int8Kernel): the contract of gemm_int8.h, bit for bit. kAvx512Vnni accumulates the
//   exact int32 block sums with 512-bit vpdpwssd (AVX512_VNNI, non-saturating), kAvx512Bw with
//   vpmaddwd + vpaddd where VNNI is absent; both then do float(isum) (round to nearest even),
//   sx * sw and one FMA per block in ascending block order, so every output equals the portable
//   kernel's. They read the same packed Int8Matrix as the portable and AVX2 kernels (two 16-output
//   groups per 512-bit tile), so the packing does not depend on the CPU.
// - Emulation (k*Emulated): the same kernel body run on a tiny set of vector operations written in
//   plain C++ after each instruction's documented semantics (src/model/avx512_ops.h); it runs on
//   any x86-64 CPU and is what tests use on machines without AVX-512.
// - Safety net: before its first use in a process, each real AVX-512 variant solves a small fixed
//   probe problem and compares it with the portable kernel (int8: bitwise). On a mismatch it writes
//   one line to stderr and the dispatcher uses the AVX2 path for the rest of the process
//   (avx512_probe_note says why).
// - Dispatch: a real variant runs only when dispatch_isa("KEV_GEMM_ISA") is kAvx512 (so KEV_ISA or
//   KEV_GEMM_ISA=avx2 force the AVX2 path) and CPUID has its extension (isa.h). For tests on
//   machines without AVX-512, KEV_AVX512_EMULATE=1 makes the int8 mode dispatch to the emulations
//   (slow; not for use) unless KEV_GEMM_ISA / KEV_ISA name a level below avx512.
// Thread safety: every function may be called from any thread.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "kev/model/gemm_int8.h"
#include "kev/model/weights.h"

namespace kev {

// ---- int8 ----
enum class Int8Kernel { kPortable, kAvx2, kAvx512Bw, kAvx512Vnni, kAvx512Emulated };
const char* int8_kernel_name(Int8Kernel k);  // "portable", "avx2", "avx512bw", "avx512vnni", ...
bool int8_kernel_supported(Int8Kernel k);    // by this CPU (the emulation always)
Int8Kernel best_int8_kernel();               // the dispatched variant, after the probe
Int8Kernel int8_kernel_for(Isa isa);         // what gemm_int8_isa(isa) runs on this CPU

// gemm_int8 (gemm_int8.h) through one given kernel; k must be supported.
void gemm_int8_kernel(Int8Kernel k, const float* x, int64_t rows, int64_t ldx, const Int8Matrix& w,
                      float* y, int64_t ldy, size_t threads);

// For gemm_int8.cpp: output groups [g0, g1) of y for quantized activations xq (int16
// [rows rounded up to kInt8TileRows][kp], zero rows past `rows`) and scales sx [..][blocks].
constexpr int64_t kInt8TileRows = 6;
void int8_range_avx512(Int8Kernel k, const int16_t* xq, int64_t kp, const float* sx, int64_t rows,
                       const Int8Matrix& w, float* y, int64_t ldy, int64_t g0, int64_t g1);

// Why a probe turned a variant off in this process ("" if none did, or none ran yet).
std::string avx512_probe_note();

}  // namespace kev
