// The precision-mode kernels' registry and drivers (precision_kernels.h): kernel ids over the
// portable folder and the family folder (precision_variants.h), names and CPU checks, the bf16
// pair packing, and the drivers that quantize or round activations and split output groups over
// threads (the start-up probes are probes.cpp; the int8 driver is gemm_int8.cpp). Which kernel a
// level runs is the family's choice (arch::int8_choice, arch::bf16_choice), made once in the
// kernel table.
#include "kev/cpu/precision_kernels.h"

#include <algorithm>
#include <cstring>

#include "cpu/arch.h"
#include "cpu/group_chunks.h"
#include "cpu/portable/portable.h"
#include "cpu/precision_variants.h"
#include "kev/core/bf16.h"
#include "kev/core/error.h"
#include "kev/core/threads.h"
#include "kev/cpu/isa.h"
#include "kev/cpu/model_kernels.h"

namespace kev {
namespace {

constexpr int64_t kGroup = kInt8Group;  // outputs per packed group (Bf16PairMatrix's too)
constexpr int kFamilyFirstId = 2;       // ids 0 and 1: portable / "none" and the emulation

// The family's variant of a kernel id, or nullptr.
template <class Variant>
const Variant* variant_at(std::span<const Variant> family, int id) {
  const int index = id - kFamilyFirstId;
  return index >= 0 && static_cast<size_t>(index) < family.size()
             ? &family[static_cast<size_t>(index)]
             : nullptr;
}

// The CPU runs a registered variant: its level, and its extension if it names one.
template <class Variant>
bool runs(const Variant* v) {
  return v != nullptr && isa_supported(v->level) && (v->cpu_runs == nullptr || v->cpu_runs());
}

template <class Kernel, class Variant>
std::vector<Kernel> all_kernels(std::span<const Variant> family) {
  std::vector<Kernel> out;
  for (size_t id = 0; id < kFamilyFirstId + family.size(); ++id)
    out.push_back(Kernel::of_id(static_cast<int>(id)));
  return out;
}

arch::Bf16Range range_for(Bf16Kernel k) {
  if (k == kEmulatedBf16Kernel) return &portable::bf16_range_avx512_emulated;
  const arch::Bf16Variant* v = find_variant(k);
  if (v == nullptr)
    fail(ErrorKind::kInternal, "no {} bf16 kernel in this {} build", bf16_kernel_name(k),
         arch_name());
  return v->range;
}

}  // namespace

Int8Kernel family_int8_kernel(int index) {
  return index < 0 ? kPortableInt8Kernel : Int8Kernel::of_id(kFamilyFirstId + index);
}

Bf16Kernel family_bf16_kernel(int index) {
  return index < 0 ? kNoBf16Kernel : Bf16Kernel::of_id(kFamilyFirstId + index);
}

const arch::Int8Variant* find_variant(Int8Kernel k) {
  return variant_at(arch::int8_variants(), k.id());
}

const arch::Bf16Variant* find_variant(Bf16Kernel k) {
  return variant_at(arch::bf16_variants(), k.id());
}

// ---- int8 ----
std::vector<Int8Kernel> int8_kernels() {
  return all_kernels<Int8Kernel>(arch::int8_variants());
}

const char* int8_kernel_name(Int8Kernel k) {
  if (k == kPortableInt8Kernel) return "portable";
  if (k == kEmulatedInt8Kernel) return "avx512vnni-emulated";
  const arch::Int8Variant* v = find_variant(k);
  return v != nullptr ? v->name : "?";
}

std::optional<Int8Kernel> find_int8_kernel(std::string_view name) {
  for (Int8Kernel k : int8_kernels())
    if (name == int8_kernel_name(k)) return k;
  return std::nullopt;
}

bool int8_kernel_supported(Int8Kernel k) {
  if (k == kPortableInt8Kernel || k == kEmulatedInt8Kernel) return true;
  return runs(find_variant(k));
}

Isa int8_kernel_level(Int8Kernel k) {
  const arch::Int8Variant* v = find_variant(k);
  return v != nullptr ? v->level : Isa::kPortable;
}

Int8Kernel int8_kernel_for(Isa isa) {
  return family_int8_kernel(arch::int8_choice(isa));
}

Int8Kernel best_int8_kernel() {
  return model_kernels().int8_kernel();
}

// ---- bf16 ----
std::vector<Bf16Kernel> bf16_kernels() {
  return all_kernels<Bf16Kernel>(arch::bf16_variants());
}

const char* bf16_kernel_name(Bf16Kernel k) {
  if (k == kNoBf16Kernel) return "none";
  if (k == kEmulatedBf16Kernel) return "avx512bf16-emulated";
  const arch::Bf16Variant* v = find_variant(k);
  return v != nullptr ? v->name : "?";
}

std::optional<Bf16Kernel> find_bf16_kernel(std::string_view name) {
  for (Bf16Kernel k : bf16_kernels())
    if (name == bf16_kernel_name(k)) return k;
  return std::nullopt;
}

bool bf16_kernel_supported(Bf16Kernel k) {
  if (k == kNoBf16Kernel || k == kEmulatedBf16Kernel) return true;
  return runs(find_variant(k));
}

Bf16Kernel best_bf16_kernel() {
  return model_kernels().bf16_kernel();
}

Bf16PairMatrix pack_bf16_pairs(const Bf16Matrix& m, size_t threads) {
  Bf16PairMatrix p;
  p.rows = m.rows;
  p.cols = m.cols;
  p.pairs = (m.cols + 1) / 2;
  p.groups = (m.rows + kGroup - 1) / kGroup;
  p.w.assign(static_cast<size_t>(p.groups * p.pairs * kGroup * 2), 0);
  parallel_for(
      static_cast<size_t>(p.groups),
      [&](size_t gi) {
        const int64_t g = static_cast<int64_t>(gi);
        for (int64_t j = 0; j < kGroup && g * kGroup + j < m.rows; ++j) {
          const uint16_t* src = m.data + (g * kGroup + j) * m.cols;
          uint16_t* dst = p.w.data() + (g * p.pairs * kGroup + j) * 2;
          for (int64_t k = 0; k < m.cols; ++k)  // the mapping may be unaligned
            std::memcpy(dst + (k / 2) * kGroup * 2 + k % 2, src + k, 2);
        }
      },
      threads == 0 ? default_workers() : threads);
  return p;
}

void gemm_bf16_pairs(Bf16Kernel k, const float* x, int64_t rows, int64_t ldx,
                     const Bf16PairMatrix& w, float* y, int64_t ldy, size_t threads) {
  if (k == kNoBf16Kernel || !bf16_kernel_supported(k))
    fail(ErrorKind::kUnsupported, "this CPU cannot run the {} bf16 kernel", bf16_kernel_name(k));
  if (rows <= 0 || w.rows <= 0) return;
  const arch::Bf16Range range = range_for(k);
  if (threads == 0) threads = default_workers();
  const int64_t ldxq = w.pairs * 2;
  const int64_t rows_padded = (rows + kBf16TileRows - 1) / kBf16TileRows * kBf16TileRows;
  thread_local std::vector<uint16_t> tl;
  std::vector<uint16_t>& xq = tl;  // the workers must see this thread's buffer, not their own
  xq.assign(static_cast<size_t>(rows_padded * ldxq), 0);
  parallel_for(
      static_cast<size_t>(rows),
      [&](size_t r) {
        const float* src = x + static_cast<int64_t>(r) * ldx;
        uint16_t* dst = xq.data() + static_cast<int64_t>(r) * ldxq;
        for (int64_t i = 0; i < w.cols; ++i) dst[i] = f32_to_bf16(src[i]);
      },
      threads);
  // Whole tiles of 4 groups per chunk, so only the matrix's last tile is a narrow one.
  group_chunks::run(w.groups, threads, 4, [&](int64_t g0, int64_t g1) {
    range(xq.data(), ldxq, rows, w, y, ldy, g0, g1);
  });
}

}  // namespace kev
