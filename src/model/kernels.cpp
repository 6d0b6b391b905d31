#include "model/kernels.h"

#include <array>

#include "kev/model/gemm.h"

namespace kev {

namespace {
// The levels the vector kernels have besides portable: an AVX2 form, which AVX-512 CPUs run too,
// and NEON dot_rows and gdn_steps.
constexpr std::array kVecLevels = {Isa::kAvx2, Isa::kNeon};
}  // namespace

const ModelKernels& model_kernels() {
  static const ModelKernels k = [] {
    ModelKernels t;
    t.gemm_ = dispatch_isa("KEV_GEMM_ISA");
    t.vec_ = isa_at_most(t.gemm_, kVecLevels);
    t.int8_ = best_int8_kernel();
    t.bf16_ = best_bf16_kernel();
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
