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
#include "cpu/drivers/group_chunks.h"
#include "cpu/drivers/precision_variants.h"
#include "cpu/portable/portable.h"
#include "kev/core/bf16.h"
#include "kev/core/error.h"
#include "kev/core/threads.h"
#include "kev/cpu/isa.h"
#include "kev/cpu/model_kernels.h"

namespace kev {
namespace {

constexpr int64_t kGroup = kInt8Group;  // outputs per packed group (Bf16PairMatrix's too)
// What sets the two registries apart: the kernels of the portable folder (ids 0 to
// kFamilyFirstId - 1) and the family's variants (the ids after). Everything else is one rule for
// both.
template <class Kernel>
struct Registry;

template <>
struct Registry<Int8Kernel> {
  static constexpr int kFamilyFirstId = 4;
  static constexpr arch::Int8Variant kPortable[kFamilyFirstId] = {
      {"portable", Isa::kPortable, nullptr, &portable::int8_range},
      {"avx512vnni-emulated", Isa::kPortable, nullptr, &portable::int8_range_avx512_emulated},
      {"avx512vnni-a8-emulated", Isa::kPortable, nullptr, nullptr,
       &portable::int8_byte_range_avx512_emulated},
      {"avxvnni-a8-emulated", Isa::kPortable, nullptr, nullptr,
       &portable::int8_byte_range_avx_vnni_emulated}};
  static std::span<const arch::Int8Variant> family() { return arch::int8_variants(); }
};

template <>
struct Registry<Bf16Kernel> {
  static constexpr int kFamilyFirstId = 2;
  static constexpr arch::Bf16Variant kPortable[kFamilyFirstId] = {
      {"none", Isa::kPortable, nullptr, nullptr},  // "none" has no kernel
      {"avx512bf16-emulated", Isa::kPortable, nullptr, &portable::bf16_range_avx512_emulated}};
  static std::span<const arch::Bf16Variant> family() { return arch::bf16_variants(); }
};

template <class Kernel>
constexpr int kFamilyFirstId = Registry<Kernel>::kFamilyFirstId;

// The family's entry for k, or nullptr (an id of the portable folder, or no kernel).
template <class Kernel>
auto variant_of(Kernel k) {
  const auto family = Registry<Kernel>::family();
  const int index = k.id() - kFamilyFirstId<Kernel>;
  return index >= 0 && static_cast<size_t>(index) < family.size()
             ? &family[static_cast<size_t>(index)]
             : nullptr;
}

// k's entry, the portable folder's or the family's, or nullptr (no such id).
template <class Kernel>
auto entry_of(Kernel k) {
  return k.id() >= 0 && k.id() < kFamilyFirstId<Kernel> ? &Registry<Kernel>::kPortable[k.id()]
                                                        : variant_of(k);
}

template <class Kernel>
std::vector<Kernel> all_kernels() {
  std::vector<Kernel> out;
  for (size_t id = 0; id < kFamilyFirstId<Kernel> + Registry<Kernel>::family().size(); ++id)
    out.push_back(Kernel::of_id(static_cast<int>(id)));
  return out;
}

template <class Kernel>
const char* name_of(Kernel k) {
  const auto* v = entry_of(k);
  return v != nullptr ? v->name : "?";
}

template <class Kernel>
std::optional<Kernel> find_by_name(std::string_view name) {
  for (Kernel k : all_kernels<Kernel>())
    if (name == name_of(k)) return k;
  return std::nullopt;
}

// The portable folder's kernels run anywhere; a family's, where the CPU runs its level and its
// extension (if it names one).
template <class Kernel>
bool cpu_runs(Kernel k) {
  if (k.id() >= 0 && k.id() < kFamilyFirstId<Kernel>) return true;
  const auto* v = variant_of(k);
  return v != nullptr && isa_supported(v->level) && (v->cpu_runs == nullptr || v->cpu_runs());
}

template <class Kernel>
auto range_of(Kernel k) {
  const auto* v = entry_of(k);
  const auto range = v != nullptr ? v->range : nullptr;
  if (range == nullptr)
    fail(ErrorKind::kInternal, "no '{}' kernel to run in this {} build", name_of(k), arch_name());
  return range;
}

}  // namespace

Int8Kernel family_int8_kernel(int index) {
  return index < 0 ? kPortableInt8Kernel : Int8Kernel::of_id(kFamilyFirstId<Int8Kernel> + index);
}

Bf16Kernel family_bf16_kernel(int index) {
  return index < 0 ? kNoBf16Kernel : Bf16Kernel::of_id(kFamilyFirstId<Bf16Kernel> + index);
}

arch::Int8Range kernel_range(Int8Kernel k) {
  return range_of(k);
}

arch::Int8ByteRange kernel_byte_range(Int8Kernel k) {
  const arch::Int8Variant* v = entry_of(k);
  if (v == nullptr || v->bytes == nullptr)
    fail(ErrorKind::kInternal, "'{}' is not a byte kernel in this {} build", name_of(k),
         arch_name());
  return v->bytes;
}
arch::Bf16Range kernel_range(Bf16Kernel k) {
  return range_of(k);
}

// ---- int8 ----
std::vector<Int8Kernel> int8_kernels() {
  return all_kernels<Int8Kernel>();
}
const char* int8_kernel_name(Int8Kernel k) {
  return name_of(k);
}
std::optional<Int8Kernel> find_int8_kernel(std::string_view name) {
  return find_by_name<Int8Kernel>(name);
}
bool int8_kernel_supported(Int8Kernel k) {
  return cpu_runs(k);
}

Isa int8_kernel_level(Int8Kernel k) {
  const arch::Int8Variant* v = variant_of(k);
  return v != nullptr ? v->level : Isa::kPortable;
}

bool int8_kernel_reads_bytes(Int8Kernel k) {
  const arch::Int8Variant* v = entry_of(k);
  return v != nullptr && v->bytes != nullptr;
}
Int8Kernel int8_kernel_for(Isa isa, ActivationWidth width) {
  if (width == ActivationWidth::k8Bit)
    if (const int bytes = arch::int8_byte_choice(isa); bytes >= 0) return family_int8_kernel(bytes);
  return family_int8_kernel(arch::int8_choice(isa));
}
Int8Kernel best_int8_kernel(ActivationWidth width) {
  return model_kernels().int8_kernel(width);
}

// ---- bf16 ----
std::vector<Bf16Kernel> bf16_kernels() {
  return all_kernels<Bf16Kernel>();
}
const char* bf16_kernel_name(Bf16Kernel k) {
  return name_of(k);
}
std::optional<Bf16Kernel> find_bf16_kernel(std::string_view name) {
  return find_by_name<Bf16Kernel>(name);
}
bool bf16_kernel_supported(Bf16Kernel k) {
  return cpu_runs(k);
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
  p.w = ZeroedBuffer<uint16_t>(static_cast<size_t>(p.groups * p.pairs * kGroup * 2));
  parallel_for(
      static_cast<size_t>(p.groups),
      [&](size_t gi) {
        const int64_t g = static_cast<int64_t>(gi);
        for (int64_t j = 0; j < kGroup && g * kGroup + j < m.rows; ++j) {
          const uint16_t* src = m.data + (g * kGroup + j) * m.cols;
          uint16_t* dst = p.w.data() + (g * p.pairs * kGroup + j) * 2;
          const int64_t whole = m.cols / 2;  // pairs of two values (the mapping may be unaligned)
          for (int64_t i = 0; i < whole; ++i) std::memcpy(dst + i * kGroup * 2, src + 2 * i, 4);
          if (m.cols % 2) std::memcpy(dst + whole * kGroup * 2, src + m.cols - 1, 2);
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
  const arch::Bf16Range range = kernel_range(k);
  if (threads == 0) threads = default_workers();
  // Whole chunks of 16 pairs, zero-padded (what the AMX kernel's tiles read; the others read
  // w.pairs of them).
  const int64_t ldxq = (w.pairs + 15) / 16 * 32;
  const int64_t rows_padded = (rows + kBf16TileRows - 1) / kBf16TileRows * kBf16TileRows;
  thread_local std::vector<uint16_t> tl;
  std::vector<uint16_t>& xq = tl;  // the workers must see this thread's buffer, not their own
  // Every element is written: each row's values and padding by the worker that rounds it, the
  // padding rows here (no serial fill pass before the parallel one).
  xq.resize(static_cast<size_t>(rows_padded * ldxq));
  std::fill(xq.begin() + rows * ldxq, xq.end(), uint16_t{0});
  parallel_for(
      static_cast<size_t>(rows),
      [&](size_t r) {
        const float* src = x + static_cast<int64_t>(r) * ldx;
        uint16_t* dst = xq.data() + static_cast<int64_t>(r) * ldxq;
        for (int64_t i = 0; i < w.cols; ++i) dst[i] = f32_to_bf16(src[i]);
        std::fill(dst + w.cols, dst + ldxq, uint16_t{0});
      },
      threads);
  // Whole tiles of 4 groups per chunk, so only the matrix's last tile is a narrow one.
  group_chunks::run(w.groups, threads, 4, [&](int64_t g0, int64_t g1) {
    range(xq.data(), ldxq, rows, w, y, ldy, g0, g1);
  });
}

}  // namespace kev
