#include "kev/cpu/model_kernels.h"

#include "cpu/arch.h"
#include "cpu/drivers/precision_variants.h"
#include "cpu/levels.h"
#include "kev/core/error.h"
#include "kev/cpu/gemm.h"

namespace kev {

ModelKernels ModelKernels::at_level(Isa level) {
  if (!isa_supported(level))
    fail(ErrorKind::kUnsupported, "this CPU cannot run the {} kernels", isa_name(level));
  ModelKernels t;
  t.gemm_ = level;
  const arch::VecVariant* vec = arch::vec(level);
  t.vec_ = vec != nullptr ? vec->level : Isa::kPortable;
  t.int8_ = family_int8_kernel(arch::int8_choice(level));
  t.int8_isa_ = int8_kernel_level(t.int8_);
  t.bf16_ = family_bf16_kernel(arch::bf16_choice(level));
  return t;
}

const ModelKernels& model_kernels() {
  static const ModelKernels k = [] {
    ModelKernels t = ModelKernels::at_level(gemm_level());
    if (avx512_emulation_requested()) {
      t.int8_ = kEmulatedInt8Kernel;
      t.int8_isa_ = int8_kernel_level(t.int8_);
      t.bf16_ = kEmulatedBf16Kernel;
    }
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

void ModelKernels::gemm_int4(const float* x, int64_t rows, int64_t ldx, const Int4Matrix& w,
                             float* y, int64_t ldy, size_t threads) const {
  gemm_int4_kernel(int8_, x, rows, ldx, w, y, ldy, threads);
}

Bf16PairMatrix ModelKernels::pack_bf16(const Bf16Matrix& m, size_t threads) const {
  return pack_bf16_pairs(m, threads);
}

void ModelKernels::gemm_bf16_dot(const float* x, int64_t rows, int64_t ldx, const Bf16PairMatrix& w,
                                 float* y, int64_t ldy, size_t threads) const {
  gemm_bf16_pairs(bf16_, x, rows, ldx, w, y, ldy, threads);
}

}  // namespace kev
