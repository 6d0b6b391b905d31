// The precision-mode kernels as the family folder registered them (arch::int8_variants,
// arch::bf16_variants), looked up by kernel: the architecture-free drivers ask these instead of
// naming a level. Private to the kernel layer. Thread safety: any thread.
#pragma once
#include "cpu/arch.h"

namespace kev {

// The family's entry for k, or nullptr (the portable kernel, the emulations, or a kernel of
// another family).
const arch::Int8Variant* find_variant(Int8Kernel k);
const arch::Bf16Variant* find_variant(Bf16Kernel k);

// The level k belongs to (`kev cpu`'s gemm_int8): kPortable for the portable kernel and the
// emulation.
Isa int8_kernel_level(Int8Kernel k);

}  // namespace kev
