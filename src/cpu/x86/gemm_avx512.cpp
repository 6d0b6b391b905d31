// The AVX-512 precision-mode kernels (precision_kernels.h): the shared tile bodies
// (src/cpu/tile512_*.inc) instantiated on the intrinsics of x86/avx512_ops.h, each under the
// target attribute of exactly its extensions; and the bf16 dot kernel's choice per level, after
// its start-up probe.
#include <algorithm>
#include <cstring>
#include <vector>

#include "cpu/drivers/precision_variants.h"
#include "cpu/x86/avx512_ops.h"
#include "cpu/x86/levels.h"
#include "cpu/x86/precision.h"

namespace kev::x86 {
namespace {

constexpr int64_t kGroup = kInt8Group;  // outputs per packed group (Bf16PairMatrix's too)

namespace vnni {
using V = avx512::Avx512VnniOps;
#define KEV_TARGET __attribute__((target("avx512f,avx512bw,avx512vnni")))
#include "cpu/bodies/tile512_int8.inc"
#include "cpu/bodies/tile512_int8_bytes.inc"
#undef KEV_TARGET
}  // namespace vnni

namespace bw {
using V = avx512::Avx512BwOps;
#define KEV_TARGET __attribute__((target("avx512f,avx512bw")))
#include "cpu/bodies/tile512_int8.inc"
#undef KEV_TARGET
}  // namespace bw

namespace bf16 {
using V = avx512::Avx512Bf16Ops;
#define KEV_TARGET __attribute__((target("avx512f,avx512bw,avx512bf16")))
#include "cpu/bodies/tile512_bf16.inc"
#undef KEV_TARGET
}  // namespace bf16

}  // namespace

void int8_range_avx512_vnni(const int16_t* xq, int64_t kp, const float* sx, int64_t rows,
                            const Int8Matrix& w, float* y, int64_t ldy, int64_t g0, int64_t g1) {
  vnni::int8_range(xq, kp, sx, rows, w, y, ldy, g0, g1);
}

void int8_byte_range_avx512_vnni(const uint8_t* xu, int64_t kp, const float* sx, int64_t rows,
                                 const Int8Matrix& w, float* y, int64_t ldy, int64_t g0,
                                 int64_t g1) {
  vnni::int8_byte_range(xu, kp, sx, rows, w, y, ldy, g0, g1);
}

void int8_range_avx512_bw(const int16_t* xq, int64_t kp, const float* sx, int64_t rows,
                          const Int8Matrix& w, float* y, int64_t ldy, int64_t g0, int64_t g1) {
  bw::int8_range(xq, kp, sx, rows, w, y, ldy, g0, g1);
}

void bf16_range_avx512(const uint16_t* xq, int64_t ldxq, int64_t rows, const Bf16PairMatrix& w,
                       float* y, int64_t ldy, int64_t g0, int64_t g1) {
  bf16::bf16_range(xq, ldxq, rows, w, y, ldy, g0, g1);
}

}  // namespace kev::x86

namespace kev::arch {

namespace {
// Positions in bf16_variants().
enum Bf16Index { kAvx512Bf16Index, kAmxBf16Index, kAmxBf16EmulatedIndex };
}  // namespace

std::span<const Bf16Variant> bf16_variants() {
  static const Bf16Variant kVariants[] = {
      {"avx512bf16", kAvx512, &cpu_has_avx512_bf16, &x86::bf16_range_avx512},
      {"amxbf16", kAvx512, &cpu_has_amx_bf16, &x86::bf16_range_amx},
      // Never dispatched: tests and benchmarks run it by name on any x86-64 CPU.
      {"amxbf16-emulated", Isa::kPortable, nullptr, &x86::bf16_range_amx_emulated}};
  static_assert(kAvx512Bf16Index == 0 && kAmxBf16Index == 1 && kAmxBf16EmulatedIndex == 2);
  return kVariants;
}

// AMX-BF16 where the CPU and the OS offer it, else AVX512-BF16, each once it passed its probe.
int bf16_choice(Isa level) {
  if (level != kAvx512) return -1;  // before the probe: only AVX-512 runs it
  static const int index = [] {
    if (cpu_has_amx_bf16() && probe_kernel(family_bf16_kernel(kAmxBf16Index)))
      return int{kAmxBf16Index};
    if (!cpu_has_avx512_bf16()) return -1;
    return probe_kernel(family_bf16_kernel(kAvx512Bf16Index)) ? int{kAvx512Bf16Index} : -1;
  }();
  return index;
}

}  // namespace kev::arch
