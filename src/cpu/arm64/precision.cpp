// The aarch64 family's bf16 dot kernel: none yet, so the bf16 mode rounds activations and runs
// the BF16 x FP32 GEMM (arch.h). The int8 GEMM's NEON kernel is arm64/gemm_int8.cpp.
#include "cpu/arch.h"

namespace kev::arch {

int bf16_choice(Isa) {
  return -1;
}

std::span<const Bf16Variant> bf16_variants() {
  return {};
}

}  // namespace kev::arch
