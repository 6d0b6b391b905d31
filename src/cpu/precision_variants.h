// The registry of the precision-mode kernels (precision_kernels.h) over what the portable folder
// and the family folder hold: id 0 is the portable int8 kernel ("none" for bf16), id 1 the
// portable emulation of the AVX-512 kernel, ids 2... the family's variants in its order
// (arch::int8_variants, arch::bf16_variants). Private to the kernel layer. Thread safety: any
// thread.
#pragma once
#include "cpu/arch.h"

namespace kev {

inline constexpr Int8Kernel kEmulatedInt8Kernel = Int8Kernel::of_id(1);
inline constexpr Bf16Kernel kEmulatedBf16Kernel = Bf16Kernel::of_id(1);

// The family's variant `index` (-1: the portable kernel / "none"), as a registered kernel.
Int8Kernel family_int8_kernel(int index);
Bf16Kernel family_bf16_kernel(int index);

// The range function a kernel runs (int8: gemm_int8.cpp's tiles; bf16: gemm_bf16_pairs's);
// Error kInternal for "none" or an id this build does not have.
arch::Int8Range kernel_range(Int8Kernel k);
arch::Bf16Range kernel_range(Bf16Kernel k);

}  // namespace kev
