#include "kev/cpu/model_kernels.h"

#include "cpu/arch.h"
#include "cpu/levels.h"
#include "cpu/precision_variants.h"
#include "kev/cpu/gemm.h"

namespace kev {

const ModelKernels& model_kernels() {
  static const ModelKernels k = [] {
    ModelKernels t;
    t.gemm_ = gemm_level();
    const arch::VecVariant* vec = arch::vec(t.gemm_);
    t.vec_ = vec != nullptr ? vec->level : Isa::kPortable;
    const bool emulate = avx512_emulation_requested();
    t.int8_ = emulate ? Int8Kernel::kAvx512Emulated : arch::int8_kernel(t.gemm_);
    t.int8_isa_ = int8_kernel_level(t.int8_);
    t.bf16_ = emulate ? Bf16Kernel::kAvx512Emulated : arch::bf16_kernel(t.gemm_);
    return t;
  }();
  return k;
}

void ModelKernels::gemm(const float* x, int64_t rows, int64_t ldx, const Bf16Matrix& w, float* y,
                        int64_t ldy, size_t threads) const {
  gemm_bf16_isa(gemm_, x, rows, ldx, w, y, ldy, threads);
}

void ModelKernels::gemm_int8(const float* x, int64_t rows, int64_t ldx, const Int8Matrix& w,
                             float* y, int64_t ldy, size_t threads) const {
  gemm_int8_kernel(int8_, x, rows, ldx, w, y, ldy, threads);
}

Bf16PairMatrix ModelKernels::pack_bf16(const Bf16Matrix& m, size_t threads) const {
  return pack_bf16_pairs(m, threads);
}

void ModelKernels::gemm_bf16_dot(const float* x, int64_t rows, int64_t ldx, const Bf16PairMatrix& w,
                                 float* y, int64_t ldy, size_t threads) const {
  gemm_bf16_pairs(bf16_, x, rows, ldx, w, y, ldy, threads);
}

}  // namespace kev
