// The registry of the precision-mode kernels (precision_kernels.h) over what the portable folder
// and the family folder hold: id 0 is the portable int8 kernel ("none" for bf16), id 1 the
// portable emulation of the AVX-512 kernel, for int8 ids 2 and 3 the emulations of the AVX-512
// and the AVX-VNNI byte kernels, then the family's variants in its order (arch::int8_variants,
// arch::bf16_variants).
// Private to the kernel layer. Thread safety: any thread.
#pragma once
#include "cpu/arch.h"

namespace kev {

inline constexpr Int8Kernel kEmulatedInt8Kernel = Int8Kernel::of_id(1);
inline constexpr Int8Kernel kEmulatedInt8ByteKernel = Int8Kernel::of_id(2);
inline constexpr Bf16Kernel kEmulatedBf16Kernel = Bf16Kernel::of_id(1);

// Every kernel but the portable one reads activations padded to whole tiles of this many rows
// (zero rows past `rows`); so do the bf16 dot kernels.
constexpr int64_t kInt8TileRows = 6;
constexpr int64_t kBf16TileRows = 6;

// Emulations: the family kernels' bodies run on a tiny set of vector operations written in plain
// C++ after each instruction's documented semantics (portable/avx512_emu_ops.h), on any CPU:
// what tests use on machines without the instructions (KEV_AVX512_EMULATE=1 in a build with
// test hooks makes both modes dispatch to them).
//
// Start-up probe (the safety net): before its first use in a process, a family kernel whose
// folder asks for it (x86's AVX-512 kernels) solves a small fixed problem and compares it with
// the portable kernel (int8: bitwise) or a float64 evaluation (bf16: within the tolerance of
// precision_kernels.h). On a mismatch it writes one line to stderr and the folder falls back to
// its next kernel for the rest of the process (kernel_probe_note says why). probe_kernel runs it
// now and says whether it passed; the dispatcher runs it once per process, tests call it on the
// emulations. The kernel must be supported.
bool probe_kernel(Int8Kernel k);
bool probe_kernel(Bf16Kernel k);

// The family's variant `index` (-1: the portable kernel / "none"), as a registered kernel.
Int8Kernel family_int8_kernel(int index);
Bf16Kernel family_bf16_kernel(int index);

// The range function a kernel runs (int8: gemm_int8.cpp's tiles; bf16: gemm_bf16_pairs's);
// Error kInternal for "none", a byte kernel (int8), or an id this build does not have.
arch::Int8Range kernel_range(Int8Kernel k);
// A byte kernel's range function; Error kInternal for any other kernel.
arch::Int8ByteRange kernel_byte_range(Int8Kernel k);
arch::Bf16Range kernel_range(Bf16Kernel k);

}  // namespace kev
