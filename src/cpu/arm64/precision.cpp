// The aarch64 family's precision-mode kernels: none yet, so the int8 GEMM runs its portable
// kernel and the bf16 mode rounds activations and runs the BF16 x FP32 GEMM (arch.h).
#include "cpu/arch.h"

namespace kev::arch {

Int8Kernel int8_kernel(Isa) {
  return Int8Kernel::kPortable;
}

Int8Range int8_range(Int8Kernel) {
  return nullptr;
}

QuantizeBlock quantize_block() {
  return nullptr;
}

Bf16Kernel bf16_kernel(Isa) {
  return Bf16Kernel::kNone;
}

Bf16Range bf16_range(Bf16Kernel) {
  return nullptr;
}

}  // namespace kev::arch
