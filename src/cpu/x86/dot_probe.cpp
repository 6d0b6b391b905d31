// The x86-64 peak probes of the precision modes' product instructions (kev/cpu/peak_probe.h's
// DotProbe, for the benchmarks): 12 independent chains of vdpbf16ps / vpdpwssd / vpdpbusd on
// zmm registers (latency 5 x 2 ports = 10 needed), of AVX-VNNI's vpdpbusd on ymm, or four
// independent AMX tile products a step (tdpbf16ps / tdpbusd into tiles 0-3 from tiles 4-7; each
// result is read again only four products later). A probe is offered only where the CPU (and, for
// AMX, Linux) runs it.
#include <cstring>

#include "cpu/arch.h"
#include "cpu/x86/amx_ops.h"
#include "cpu/x86/levels.h"
#include "cpu/x86/target.h"

namespace kev::arch {
namespace {

// Keeps the chains' results alive without reading them in the loop.
template <typename Vec>
void keep(const Vec* acc, int n) {
  alignas(64) int32_t lanes[16];
  int32_t sink = 0;
  for (int i = 0; i < n; ++i) {
    static_assert(sizeof(Vec) <= sizeof lanes);
    std::memcpy(lanes, &acc[i], sizeof(Vec));
    sink ^= lanes[0];
  }
  volatile int32_t kept = sink;
  (void)kept;
}

__attribute__((target("avx512f,avx512bf16"))) double bf16_pairs(long iters) {
  __m512 acc[12];
  for (int i = 0; i < 12; ++i) acc[i] = _mm512_set1_ps(0.5f + static_cast<float>(i));
  const __m512bh a = (__m512bh)_mm512_set1_epi32(0x3f7f3f7f);  // BF16 0.996 in both halves
  const __m512bh b = (__m512bh)_mm512_set1_epi32(0x38d138d1);  // BF16 ~1e-4
  for (long n = 0; n < iters; ++n)
    for (int i = 0; i < 12; ++i) acc[i] = _mm512_dpbf16_ps(acc[i], a, b);
  keep(acc, 12);
  return static_cast<double>(iters) * 12 * 16 * 2 * 2;
}

__attribute__((target("avx512f,avx512vnni"))) double int16_pairs(long iters) {
  __m512i acc[12];
  for (int i = 0; i < 12; ++i) acc[i] = _mm512_set1_epi32(i);
  const __m512i a = _mm512_set1_epi16(3), b = _mm512_set1_epi16(-2);
  for (long n = 0; n < iters; ++n)
    for (int i = 0; i < 12; ++i) acc[i] = _mm512_dpwssd_epi32(acc[i], a, b);
  keep(acc, 12);
  return static_cast<double>(iters) * 12 * 16 * 2 * 2;
}

__attribute__((target("avx512f,avx512vnni"))) double int8_quads(long iters) {
  __m512i acc[12];
  for (int i = 0; i < 12; ++i) acc[i] = _mm512_set1_epi32(i);
  const __m512i a = _mm512_set1_epi8(3), b = _mm512_set1_epi8(-2);
  for (long n = 0; n < iters; ++n)
    for (int i = 0; i < 12; ++i) acc[i] = _mm512_dpbusd_epi32(acc[i], a, b);
  keep(acc, 12);
  return static_cast<double>(iters) * 12 * 16 * 4 * 2;
}

__attribute__((target("avx2,avxvnni"))) double int8_quads_ymm(long iters) {
  __m256i acc[12];
  for (int i = 0; i < 12; ++i) acc[i] = _mm256_set1_epi32(i);
  const __m256i a = _mm256_set1_epi8(3), b = _mm256_set1_epi8(-2);
  for (long n = 0; n < iters; ++n)
    for (int i = 0; i < 12; ++i) acc[i] = _mm256_dpbusd_avx_epi32(acc[i], a, b);
  keep(acc, 12);
  return static_cast<double>(iters) * 12 * 8 * 4 * 2;
}

// Every tile 16 rows x 64 bytes (palette 1).
void configure_tiles() {
  alignas(64) uint8_t cfg[64] = {};
  cfg[0] = 1;
  for (int t = 0; t < 8; ++t) {
    cfg[16 + 2 * t] = 64;  // bytes per row, little-endian uint16
    cfg[48 + t] = 16;      // rows
  }
  amx::AmxTileOps::config(cfg);
}

// One step: four independent tile products (C0..C3 += A4|A5 x B6|B7), 16 x 16 outputs of
// `depth` products each.
template <bool kBf16>
double amx_tiles(long iters) {
  using T = amx::AmxTileOps;
  alignas(64) uint8_t data[16 * 64];
  for (int i = 0; i < 16 * 64; ++i)
    data[i] = kBf16 ? (i & 1 ? 0x3f : 0x80) : static_cast<uint8_t>(i);
  configure_tiles();
  T::zero<0>(), T::zero<1>(), T::zero<2>(), T::zero<3>();
  T::load<4>(data, 64), T::load<5>(data, 64), T::load<6>(data, 64), T::load<7>(data, 64);
  for (long n = 0; n < iters; ++n) {
    if constexpr (kBf16) {
      T::dpbf16ps<0, 4, 6>(), T::dpbf16ps<1, 4, 7>(), T::dpbf16ps<2, 5, 6>(),
          T::dpbf16ps<3, 5, 7>();
    } else {
      T::dpbusd<0, 4, 6>(), T::dpbusd<1, 4, 7>(), T::dpbusd<2, 5, 6>(), T::dpbusd<3, 5, 7>();
    }
  }
  alignas(64) uint8_t out[16 * 64];
  T::store<0>(out, 64);
  volatile uint8_t kept = out[0];
  (void)kept;
  T::release();
  const double depth = kBf16 ? 32 : 64;  // products per output per tile product
  return static_cast<double>(iters) * 4 * 16 * 16 * depth * 2;
}

}  // namespace

DotChains dot_chains(DotProbe which) {
  switch (which) {
    case DotProbe::kBf16Pairs:
      return cpu_has_avx512_bf16() ? bf16_pairs : nullptr;
    case DotProbe::kInt16Pairs:
      return cpu_has_avx512_vnni() ? int16_pairs : nullptr;
    case DotProbe::kInt8Quads:
      return cpu_has_avx512_vnni() ? int8_quads : nullptr;
    case DotProbe::kInt8QuadsYmm:
      return cpu_has_avx_vnni() ? int8_quads_ymm : nullptr;
    case DotProbe::kInt8Sdot:
      return nullptr;
    case DotProbe::kAmxBf16:
      return cpu_has_amx_bf16() ? amx_tiles<true> : nullptr;
    case DotProbe::kAmxInt8:
      return cpu_has_amx_int8() ? amx_tiles<false> : nullptr;
  }
  return nullptr;
}

}  // namespace kev::arch
