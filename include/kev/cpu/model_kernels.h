// The model's kernel table: every kernel the forward pass calls, with the variant of each chosen
// once per process from the CPU and KEV_GEMM_ISA / KEV_ISA (kev/cpu/isa.h). The layer math
// (src/model/layers.cpp) and the projections (src/model/projections.cpp) call this table only and
// name no instruction set; the variants live behind it in the kernel layer (src/cpu/: portable/
// always, plus the folder of the CPU family the binary is built for). Every entry keeps its
// family's fixed order of operations (gemm.h, gemm_int8.h, vec.h), so the choice changes speed,
// never a bit, with one documented exception: the AVX512-BF16 dot kernel of the bf16 mode
// (precision_kernels.h).
// Thread safety: the table is immutable once built; any thread may call it.
#pragma once
#include <cstddef>
#include <cstdint>

#include "kev/cpu/gemm_int8.h"
#include "kev/cpu/isa.h"
#include "kev/cpu/matrix.h"
#include "kev/cpu/precision_kernels.h"
#include "kev/cpu/vec.h"

namespace kev {

class ModelKernels {
 public:
  // The table of one level this CPU runs (Error kUnsupported otherwise): what a backend holds
  // when it wants another level than the process's table below (the tests' portable backend).
  static ModelKernels at_level(Isa level);

  // y[rows, w.rows] (row stride ldy) = x * W^T, FP32 activations x BF16 weights (gemm.h).
  void gemm(const float* x, int64_t rows, int64_t ldx, const Bf16Matrix& w, float* y, int64_t ldy,
            size_t threads) const;
  // The same with blockwise int8 weights and 16- or 8-bit activations (gemm_int8.h), through
  // the width's kernel.
  void gemm_int8(const float* x, int64_t rows, int64_t ldx, const Int8Matrix& w, float* y,
                 int64_t ldy, size_t threads, ActivationWidth width) const;
  // The same with 4-bit weights (a q4 bundle's, gemm_int8.h) through the same int8 kernel.
  void gemm_int4(const float* x, int64_t rows, int64_t ldx, const Int4Matrix& w, float* y,
                 int64_t ldy, size_t threads, ActivationWidth width) const;
  // Whether the bf16 mode has a dot-product kernel here (then its weights are packed with
  // pack_bf16 and run through gemm_bf16_dot); without one it rounds activations and runs gemm.
  bool has_bf16_dot() const { return bf16_ != kNoBf16Kernel; }
  Bf16PairMatrix pack_bf16(const Bf16Matrix& m, size_t threads) const;
  void gemm_bf16_dot(const float* x, int64_t rows, int64_t ldx, const Bf16PairMatrix& w, float* y,
                     int64_t ldy, size_t threads) const;

  // The vector kernels (vec.h).
  float dot(const float* a, const float* b, int64_t n) const { return vec::dot(a, b, n); }
  float sum_sq(const float* a, int64_t n) const { return vec::sum_sq(a, n); }
  void axpy(float* y, float a, const float* x, int64_t n) const { vec::axpy(y, a, x, n); }
  void axpy_rows(float* y, const float* a, const float* x, int64_t ld, int64_t rows,
                 int64_t n) const {
    vec::axpy_rows(y, a, x, ld, rows, n);
  }
  void scale(float* y, float a, int64_t n) const { vec::scale(y, a, n); }
  float scale_max(float* y, float a, int64_t n) const { return vec::scale_max(y, a, n); }
  void divide(float* y, float d, int64_t n) const { vec::divide(y, d, n); }
  // The elementwise activations over arrays (vec.h; fixed_math.h's exp, the same bits everywhere).
  void exp_shifted(float* y, float shift, int64_t n) const { vec::exp_shifted(y, shift, n); }
  void silu(float* y, int64_t n) const { vec::silu(y, n); }
  void silu_mul(float* y, const float* u, int64_t n) const { vec::silu_mul(y, u, n); }
  void mul_sigmoid(float* y, const float* g, int64_t n) const { vec::mul_sigmoid(y, g, n); }
  void scale_mul_silu(float* y, float a, const float* w, const float* g, int64_t n) const {
    vec::scale_mul_silu(y, a, w, g, n);
  }
  void dot_rows(const float* a, const float* x, int64_t ld, int64_t rows, int64_t n,
                float* out) const {
    vec::dot_rows_isa(vec_, a, x, ld, rows, n, out);
  }
  void dot_block(const float* a, int64_t lda, int64_t na, const float* x, int64_t ldx, int64_t nx,
                 int64_t n, float* out, int64_t ldo) const {
    vec::dot_block_isa(vec_, a, lda, na, x, ldx, nx, n, out, ldo);
  }
  void axpy_block(float* y, int64_t ldy, int64_t ny, const float* p, int64_t ldp, const float* x,
                  int64_t ldx, int64_t rows, int64_t n) const {
    vec::axpy_block_isa(vec_, y, ldy, ny, p, ldp, x, ldx, rows, n);
  }
  void gdn_steps(float* s, int64_t dk, int64_t dv, int64_t len, const vec::GdnTokens& t) const {
    vec::gdn_steps_isa(vec_, s, dk, dv, len, t);
  }

  // The variants in use (`kev cpu`).
  Isa gemm_isa() const { return gemm_; }
  Isa vec_isa() const { return vec_; }
  Isa int8_isa() const { return int8_isa_; }
  Int8Kernel int8_kernel(ActivationWidth width = ActivationWidth::k16Bit) const {
    return width == ActivationWidth::k8Bit ? int8_a8_ : int8_;
  }
  Bf16Kernel bf16_kernel() const { return bf16_; }

 private:
  friend const ModelKernels& model_kernels();
  Isa gemm_ = Isa::kPortable, vec_ = Isa::kPortable, int8_isa_ = Isa::kPortable;
  Int8Kernel int8_ = kPortableInt8Kernel;     // 16-bit activations
  Int8Kernel int8_a8_ = kPortableInt8Kernel;  // 8-bit activations (a byte kernel where one runs)
  Bf16Kernel bf16_ = kNoBf16Kernel;
};

// The table of this process (chosen at first call; the start-up probes of the kernels that
// have one run then).
const ModelKernels& model_kernels();

// KEV_INT8_KERNEL=<name> / KEV_BF16_KERNEL=<name> (docs/environment.md): the int8 and w8a8 modes
// run that int8 kernel (a byte kernel: w8a8 only, int8 keeps its own), the bf16 mode that dot
// kernel ("none": the rounding path), one of `kev cpu`'s
// names this CPU runs, instead of the level's choice (for comparisons of speed; every int8 kernel
// gives the same bits, bf16 dot kernels each their own within the bound of precision_kernels.h).
// Refuses (Error, bad input) a name that is not registered here or that this CPU cannot run, and
// (unsupported) a kernel that fails its start-up probe, so a typo fails at start-up.
void check_kernel_environment();

}  // namespace kev
