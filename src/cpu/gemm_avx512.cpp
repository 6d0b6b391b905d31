// The precision modes' architecture-free part (gemm_avx512.h): kernel names and CPU checks,
// the bf16 pair packing, the drivers that quantize or round activations and split output groups
// over threads (the start-up probes are probes.cpp). The kernels come from the family folder
// (arch::int8_range, arch::bf16_range) or the portable emulation; which one a level runs is the
// family's choice (arch::int8_kernel, arch::bf16_kernel), made once in the kernel table.
#include "kev/cpu/gemm_avx512.h"

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

arch::Bf16Range range_for(Bf16Kernel k) {
  if (k == Bf16Kernel::kAvx512Emulated) return &portable::bf16_range_avx512_emulated;
  const arch::Bf16Variant* v = find_variant(k);
  if (v == nullptr)
    fail(ErrorKind::kInternal, "no {} bf16 kernel in this {} build", bf16_kernel_name(k),
         arch_name());
  return v->range;
}

// The CPU runs a registered variant: its level, and its extension if it names one.
template <class Variant>
bool runs(const Variant* v) {
  return v != nullptr && isa_supported(v->level) && (v->cpu_runs == nullptr || v->cpu_runs());
}

}  // namespace

const arch::Int8Variant* find_variant(Int8Kernel k) {
  for (const arch::Int8Variant& v : arch::int8_variants())
    if (v.kernel == k) return &v;
  return nullptr;
}

const arch::Bf16Variant* find_variant(Bf16Kernel k) {
  for (const arch::Bf16Variant& v : arch::bf16_variants())
    if (v.kernel == k) return &v;
  return nullptr;
}

Isa int8_kernel_level(Int8Kernel k) {
  const arch::Int8Variant* v = find_variant(k);
  return v != nullptr ? v->level : Isa::kPortable;
}

// ---- int8 ----
const char* int8_kernel_name(Int8Kernel k) {
  switch (k) {
    case Int8Kernel::kAvx2:
      return "avx2";
    case Int8Kernel::kAvx512Bw:
      return "avx512bw";
    case Int8Kernel::kAvx512Vnni:
      return "avx512vnni";
    case Int8Kernel::kAvx512Emulated:
      return "avx512vnni-emulated";
    case Int8Kernel::kNeon:
      return "neon";
    default:
      return "portable";
  }
}

bool int8_kernel_supported(Int8Kernel k) {
  if (k == Int8Kernel::kPortable || k == Int8Kernel::kAvx512Emulated) return true;
  return runs(find_variant(k));
}

Int8Kernel int8_kernel_for(Isa isa) {
  return arch::int8_kernel(isa);
}

Int8Kernel best_int8_kernel() {
  return model_kernels().int8_kernel();
}

// ---- bf16 ----
const char* bf16_kernel_name(Bf16Kernel k) {
  switch (k) {
    case Bf16Kernel::kAvx512Bf16:
      return "avx512bf16";
    case Bf16Kernel::kAvx512Emulated:
      return "avx512bf16-emulated";
    default:
      return "none";
  }
}

bool bf16_kernel_supported(Bf16Kernel k) {
  if (k == Bf16Kernel::kNone || k == Bf16Kernel::kAvx512Emulated) return true;
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
  if (k == Bf16Kernel::kNone || !bf16_kernel_supported(k))
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
