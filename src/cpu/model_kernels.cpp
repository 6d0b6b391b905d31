#include "kev/cpu/model_kernels.h"

#include "cpu/arch.h"
#include "cpu/levels.h"
#include "kev/cpu/gemm.h"

namespace kev {

namespace {

// The level an int8 kernel belongs to (`kev cpu`: "gemm_int8"); the emulation belongs to none.
Isa int8_kernel_isa(Int8Kernel k) {
  switch (k) {
    case Int8Kernel::kAvx512Bw:
    case Int8Kernel::kAvx512Vnni:
      return Isa::kAvx512;
    case Int8Kernel::kAvx2:
      return Isa::kAvx2;
    case Int8Kernel::kNeon:
      return Isa::kNeon;
    default:
      return Isa::kPortable;
  }
}

}  // namespace

const ModelKernels& model_kernels() {
  static const ModelKernels k = [] {
    ModelKernels t;
    t.gemm_ = gemm_level();
    const arch::VecVariant* vec = arch::vec(t.gemm_);
    t.vec_ = vec != nullptr ? vec->level : Isa::kPortable;
    const bool emulate = avx512_emulation_requested();
    t.int8_ = emulate ? Int8Kernel::kAvx512Emulated : arch::int8_kernel(t.gemm_);
    t.int8_isa_ = int8_kernel_isa(t.int8_);
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
