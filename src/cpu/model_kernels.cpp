#include "kev/cpu/model_kernels.h"

#include <cstdlib>
#include <optional>
#include <string>

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

namespace {

// The kernel KEV_INT8_KERNEL names, or nullopt when it is unset or empty.
std::optional<Int8Kernel> int8_kernel_from_env() {
  const char* name = std::getenv("KEV_INT8_KERNEL");
  if (name == nullptr || *name == '\0') return std::nullopt;
  const std::optional<Int8Kernel> k = find_int8_kernel(name);
  if (!k) {
    std::string names;
    for (Int8Kernel each : int8_kernels())
      if (int8_kernel_supported(each))
        names += std::string(names.empty() ? "" : ", ") + int8_kernel_name(each);
    fail(ErrorKind::kBadInput, "KEV_INT8_KERNEL={}: no such int8 kernel (this CPU runs: {})", name,
         names);
  }
  if (!int8_kernel_supported(*k))
    fail(ErrorKind::kBadInput, "KEV_INT8_KERNEL={}: this CPU cannot run that kernel", name);
  static const bool passed = probe_kernel(*k);  // the variable is read once per process
  if (!passed) fail(ErrorKind::kUnsupported, "KEV_INT8_KERNEL={}: {}", name, kernel_probe_note());
  return k;
}

}  // namespace

void check_kernel_environment() {
  int8_kernel_from_env();
}

const ModelKernels& model_kernels() {
  static const ModelKernels k = [] {
    ModelKernels t = ModelKernels::at_level(gemm_level());
    if (avx512_emulation_requested()) {
      t.int8_ = kEmulatedInt8Kernel;
      t.int8_isa_ = int8_kernel_level(t.int8_);
      t.bf16_ = kEmulatedBf16Kernel;
    }
    if (const std::optional<Int8Kernel> named = int8_kernel_from_env()) {
      t.int8_ = *named;
      t.int8_isa_ = int8_kernel_level(t.int8_);
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
