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

// The family's entry for k, or nullptr (portable, "none", an emulation, or no kernel).
const arch::Int8Variant* find_variant(Int8Kernel k);
const arch::Bf16Variant* find_variant(Bf16Kernel k);

}  // namespace kev
