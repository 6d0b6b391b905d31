// The level each kernel family runs, chosen once per process from the CPU and the environment
// (KEV_ISA, KEV_GEMM_ISA, KEV_MERGE_ISA, KEV_HEAD_ISA: kev/cpu/isa.h). The one place the kernel
// layer reads those variables; merge_isa() and head_isa() are declared in their families'
// headers. Private to the kernel layer. Thread safety: any thread.
#pragma once
#include "kev/cpu/isa.h"

namespace kev {

// The model's GEMM level: the best this CPU supports, capped by KEV_GEMM_ISA / KEV_ISA.
Isa gemm_level();

// KEV_AVX512_EMULATE=1 in a build with test hooks (kev/core/test_hooks.h; for tests on machines
// without AVX-512): the int8 and bf16 modes run the emulated AVX-512 kernels, unless
// KEV_GEMM_ISA / KEV_ISA name a level other than avx512.
bool avx512_emulation_requested();

}  // namespace kev
