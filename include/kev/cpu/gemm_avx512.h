// AVX-512 kernels of the fast precision modes (`--precision int8` and `--precision bf16`), each
// also built as a portable emulation so that machines without AVX-512 can test the kernel.
//
// Contract:
// - int8 (Int8Kernel): the contract of gemm_int8.h, bit for bit. kAvx512Vnni accumulates the
//   exact int32 block sums with 512-bit vpdpwssd (AVX512_VNNI, non-saturating), kAvx512Bw with
//   vpmaddwd + vpaddd where VNNI is absent; both then do float(isum) (round to nearest even),
//   sx * sw and one FMA per block in ascending block order, so every output equals the portable
//   kernel's. They read the same packed Int8Matrix as the portable and AVX2 kernels (two 16-output
//   groups per 512-bit tile), so the packing does not depend on the CPU.
// - bf16 (Bf16Kernel): y = bf16(x) * W^T with the activations rounded to BF16 (round to nearest
//   even, bf16.h, as the AVX2 bf16 mode does) and one FP32 accumulator per output that takes,
//   for k-pairs p = 0, 1, ... in ascending order, vdpbf16ps's two FMAs: first the odd element
//   (k = 2p + 1), then the even one (k = 2p), each rounded to nearest even, with denormal inputs
//   read as zero and denormal results flushed to zero (Intel SDM, VDPBF16PS). This is NOT the
//   AVX2 bf16 mode's order (gemm.h's reduce16 of exact BF16 x BF16 products), so kAvx512Bf16's
//   outputs differ from the AVX2 machine's in the last bits: a different mode of the same
//   precision, held by its own tolerance (|y - y64| <= g * sum |x_k w_k|, g = (K-1)u / (1 -
//   (K-1)u), u = 2^-24, which is <= K * 2^-24 for K <= 4096: K - 1 roundings of exact products,
//   against a float64 evaluation of the same BF16 operands, plus the flushed denormals) and by the
//   budget of docs/performance.md. It is still independent of the batch and the thread split.
//   Weights are packed once at load time (Bf16PairMatrix, 2 bytes per weight; the caller releases
//   the mapped BF16 pages, as int8 does).
// - Emulation (k*Emulated): the same kernel body run on a tiny set of vector operations written in
//   plain C++ after each instruction's documented semantics (src/cpu/portable/avx512_emu_ops.h);
//   it runs on any CPU of any architecture and is what tests use on machines without AVX-512.
// - Safety net: before its first use in a process, each real AVX-512 variant solves a small fixed
//   probe problem and compares it with the portable kernel (int8: bitwise) or a float64 evaluation
//   (bf16: within the tolerance above). On a mismatch it writes one line to stderr and the
//   dispatcher uses the AVX2 path for the rest of the process (avx512_probe_note says why).
// - Dispatch: the kernel table (model_kernels.h) picks once per process; a real variant runs only
//   when the GEMM level is avx512 (so KEV_ISA or KEV_GEMM_ISA=avx2 force the AVX2 path) and
//   CPUID has its extension (the family registers each kernel with its level and extension
//   check, src/cpu/arch.h). The kernels live in src/cpu/x86/, the emulation in
//   src/cpu/portable/. For tests on
//   machines without AVX-512, KEV_AVX512_EMULATE=1 makes both modes dispatch to the emulations
//   (slow; not for use) unless KEV_GEMM_ISA / KEV_ISA name a level below avx512.
// Thread safety: every function may be called from any thread.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "kev/cpu/gemm_int8.h"
#include "kev/cpu/matrix.h"

namespace kev {

// ---- int8 ----
// kNeon: the aarch64 kernel (src/cpu/arm64/gemm_int8.cpp), the int8 variant of the neon level.
enum class Int8Kernel { kPortable, kAvx2, kAvx512Bw, kAvx512Vnni, kAvx512Emulated, kNeon };
const char* int8_kernel_name(Int8Kernel k);  // "portable", "avx2", "avx512bw", "avx512vnni", ...
bool int8_kernel_supported(Int8Kernel k);    // by this CPU (the emulation always)
Int8Kernel best_int8_kernel();               // the dispatched variant, after the probe
Int8Kernel int8_kernel_for(Isa isa);         // what gemm_int8_isa(isa) runs on this CPU

// gemm_int8 (gemm_int8.h) through one given kernel; k must be supported.
void gemm_int8_kernel(Int8Kernel k, const float* x, int64_t rows, int64_t ldx, const Int8Matrix& w,
                      float* y, int64_t ldy, size_t threads);

// Every kernel but the portable one reads activations padded to whole tiles of this many rows
// (zero rows past `rows`).
constexpr int64_t kInt8TileRows = 6;

// ---- bf16 ----
// The bf16 dot kernels read activations padded to whole tiles of this many rows.
constexpr int64_t kBf16TileRows = 6;
enum class Bf16Kernel {
  kNone,        // no dot-product kernel: the bf16 mode rounds activations and runs gemm.h
  kAvx512Bf16,  // vdpbf16ps
  kAvx512Emulated,
};
const char* bf16_kernel_name(Bf16Kernel k);  // "none", "avx512bf16", "avx512bf16-emulated"
bool bf16_kernel_supported(Bf16Kernel k);
Bf16Kernel best_bf16_kernel();  // kAvx512Bf16 where it runs and passed its probe, else kNone

Bf16PairMatrix pack_bf16_pairs(const Bf16Matrix& m, size_t threads = 0);

// y[rows, w.rows] (row stride ldy) = bf16(x) * W^T as above; k must be kAvx512Bf16 or the
// emulation and supported.
void gemm_bf16_pairs(Bf16Kernel k, const float* x, int64_t rows, int64_t ldx,
                     const Bf16PairMatrix& w, float* y, int64_t ldy, size_t threads = 0);

// Runs a kernel's start-up probe (above) now and says whether it passed (a failure is also
// reported on stderr and in avx512_probe_note). The dispatcher runs it by itself, once per
// process; tests call it on the emulations. The kernel must be supported.
bool probe_avx512_kernel(Int8Kernel k);
bool probe_avx512_kernel(Bf16Kernel k);

// Why a probe turned a variant off in this process ("" if none did, or none ran yet).
std::string avx512_probe_note();

}  // namespace kev
