#include "kev/cpu/model_kernels.h"

#include <cstdlib>
#include <optional>
#include <string>
#include <vector>

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
  t.int8_ = int8_kernel_for(level, ActivationWidth::k16Bit);
  t.int8_a8_ = int8_kernel_for(level, ActivationWidth::k8Bit);
  t.int8_isa_ = int8_kernel_level(t.int8_);
  t.bf16_ = family_bf16_kernel(arch::bf16_choice(level));
  return t;
}

namespace {

// What sets the two variables apart: the registry each names a kernel of.
struct Int8Registry {
  using Kernel = Int8Kernel;
  static constexpr const char* kVariable = "KEV_INT8_KERNEL";
  static constexpr const char* kWhat = "int8";
  static std::vector<Int8Kernel> all() { return int8_kernels(); }
  static std::optional<Int8Kernel> find(const char* n) { return find_int8_kernel(n); }
  static const char* name(Int8Kernel k) { return int8_kernel_name(k); }
  static bool runs(Int8Kernel k) { return int8_kernel_supported(k); }
};
struct Bf16Registry {
  using Kernel = Bf16Kernel;
  static constexpr const char* kVariable = "KEV_BF16_KERNEL";
  static constexpr const char* kWhat = "bf16 dot";
  static std::vector<Bf16Kernel> all() { return bf16_kernels(); }
  static std::optional<Bf16Kernel> find(const char* n) { return find_bf16_kernel(n); }
  static const char* name(Bf16Kernel k) { return bf16_kernel_name(k); }
  static bool runs(Bf16Kernel k) { return k == kNoBf16Kernel || bf16_kernel_supported(k); }
};

// The kernel the registry's variable names, or nullopt when it is unset or empty. The named
// kernel must pass its start-up probe (the portable kernel and "none" have none).
template <class R>
std::optional<typename R::Kernel> kernel_from_env() {
  const char* name = std::getenv(R::kVariable);
  if (name == nullptr || *name == '\0') return std::nullopt;
  const std::optional<typename R::Kernel> k = R::find(name);
  if (!k) {
    std::string names;
    for (typename R::Kernel each : R::all())
      if (R::runs(each)) names += std::string(names.empty() ? "" : ", ") + R::name(each);
    fail(ErrorKind::kBadInput, "{}={}: no such {} kernel (this CPU runs: {})", R::kVariable, name,
         R::kWhat, names);
  }
  if (!R::runs(*k))
    fail(ErrorKind::kBadInput, "{}={}: this CPU cannot run that kernel", R::kVariable, name);
  static const bool passed = *k == typename R::Kernel{} || probe_kernel(*k);  // read once
  if (!passed) fail(ErrorKind::kUnsupported, "{}={}: {}", R::kVariable, name, kernel_probe_note());
  return k;
}

}  // namespace

void check_kernel_environment() {
  kernel_from_env<Int8Registry>();
  kernel_from_env<Bf16Registry>();
}

const ModelKernels& model_kernels() {
  static const ModelKernels k = [] {
    ModelKernels t = ModelKernels::at_level(gemm_level());
    if (avx512_emulation_requested()) {
      t.int8_ = kEmulatedInt8Kernel;
      t.int8_a8_ = kEmulatedInt8ByteKernel;
      t.int8_isa_ = int8_kernel_level(t.int8_);
      t.bf16_ = kEmulatedBf16Kernel;
    }
    if (const std::optional<Int8Kernel> named = kernel_from_env<Int8Registry>()) {
      t.int8_a8_ = *named;
      if (!int8_kernel_reads_bytes(*named)) {
        t.int8_ = *named;
        t.int8_isa_ = int8_kernel_level(t.int8_);
      }
    }
    if (const std::optional<Bf16Kernel> named = kernel_from_env<Bf16Registry>()) t.bf16_ = *named;
    return t;
  }();
  return k;
}

void ModelKernels::gemm(const float* x, int64_t rows, int64_t ldx, const Bf16Matrix& w, float* y,
                        int64_t ldy, size_t threads) const {
  gemm_bf16_isa(gemm_, x, rows, ldx, w, y, ldy, threads);
}

void ModelKernels::gemm_int8(const float* x, int64_t rows, int64_t ldx, const Int8Matrix& w,
                             float* y, int64_t ldy, size_t threads, ActivationWidth width) const {
  gemm_int8_kernel(int8_kernel(width), x, rows, ldx, w, y, ldy, threads, width);
}

void ModelKernels::gemm_int4(const float* x, int64_t rows, int64_t ldx, const Int4Matrix& w,
                             float* y, int64_t ldy, size_t threads, ActivationWidth width) const {
  gemm_int4_kernel(int8_kernel(width), x, rows, ldx, w, y, ldy, threads, width);
}

Bf16PairMatrix ModelKernels::pack_bf16(const Bf16Matrix& m, size_t threads) const {
  return pack_bf16_pairs(m, threads);
}

void ModelKernels::gemm_bf16_dot(const float* x, int64_t rows, int64_t ldx, const Bf16PairMatrix& w,
                                 float* y, int64_t ldy, size_t threads) const {
  gemm_bf16_pairs(bf16_, x, rows, ldx, w, y, ldy, threads);
}

}  // namespace kev
