// The x86-64 int8 GEMM variants (gemm_int8.h's order, bit-identical to the portable one): the
// AVX2 block quantizer and 6 x 16 kernel, and the choice of kernel per level, where AVX-512 runs
// the VNNI or BW kernel (x86/gemm_avx512.cpp) once it passed its start-up probe. The AMX kernel
// (x86/gemm_amx.cpp) is registered, run by name only.
#include <algorithm>
#include <cstring>

#include "cpu/bodies/int8_layout.h"
#include "cpu/drivers/precision_variants.h"
#include "cpu/x86/levels.h"
#include "cpu/x86/precision.h"
#include "cpu/x86/target.h"

namespace kev::arch {
namespace {

using int8_layout::kGroup;
using int8_layout::kPairs;
constexpr int64_t kMr = kInt8TileRows;  // activation rows per tile (the driver pads to it)

#define KEV_AVX2 KEV_TARGET_AVX2

// quantize_block for 32 floats (zero-padded) with AVX2: max, multiply, round-to-nearest-even
// and clamp are exact or correctly rounded per element, so the result equals the scalar one.
KEV_AVX2 float quantize_block_avx2(const float* v, int32_t* q, float qmax) {
  const __m256 sign = _mm256_set1_ps(-0.0f);
  __m256 x[4];
  for (int i = 0; i < 4; ++i) x[i] = _mm256_loadu_ps(v + 8 * i);
  __m256 m =
      _mm256_max_ps(_mm256_max_ps(_mm256_andnot_ps(sign, x[0]), _mm256_andnot_ps(sign, x[1])),
                    _mm256_max_ps(_mm256_andnot_ps(sign, x[2]), _mm256_andnot_ps(sign, x[3])));
  __m128 h = _mm_max_ps(_mm256_castps256_ps128(m), _mm256_extractf128_ps(m, 1));
  h = _mm_max_ps(h, _mm_movehl_ps(h, h));
  h = _mm_max_ss(h, _mm_shuffle_ps(h, h, 1));
  const float amax = _mm_cvtss_f32(h);
  if (!(amax >= 1e-30f)) {
    for (int i = 0; i < 4; ++i)
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(q + 8 * i), _mm256_setzero_si256());
    return 0.0f;
  }
  const __m256 inv = _mm256_set1_ps(qmax / amax), hi = _mm256_set1_ps(qmax),
               lo = _mm256_set1_ps(-qmax);
  for (int i = 0; i < 4; ++i) {
    __m256 r =
        _mm256_round_ps(_mm256_mul_ps(x[i], inv), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    r = _mm256_min_ps(hi, _mm256_max_ps(lo, r));
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(q + 8 * i), _mm256_cvtps_epi32(r));
  }
  return amax / qmax;
}

// ---- AVX2 GEMM: 6 rows x 16 outputs; per pair of k, the two activations (int16) of a row are
// broadcast and vpmaddwd-ed with 8 outputs' sign-extended weight pairs, exact int32 sums per
// block, then one convert + scale FMA per block (the portable order, lane = output).
KEV_AVX2 inline __m256i bcast_pair(const int16_t* p) {
  int32_t v;
  std::memcpy(&v, p, 4);
  return _mm256_set1_epi32(v);
}

// One row's step: two vpmaddwd (outputs 0-7, 8-15) on the broadcast pair of row R.
#define KEV_I8_ROW(R)                                            \
  v = bcast_pair(x + (R)*kp + b * kQuantBlock + 2 * s);          \
  a##R##0 = _mm256_add_epi32(a##R##0, _mm256_madd_epi16(v, w0)); \
  a##R##1 = _mm256_add_epi32(a##R##1, _mm256_madd_epi16(v, w1));
#define KEV_I8_SCALE(R)                                                                  \
  d = _mm256_set1_ps(sx[(R)*blocks + b]);                                                \
  f[R][0] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(a##R##0), _mm256_mul_ps(d, s0), f[R][0]); \
  f[R][1] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(a##R##1), _mm256_mul_ps(d, s1), f[R][1]);

// kMr (6) rows x 16 outputs: 12 int32 accumulators + 2 weight registers + 1 broadcast; the
// FP32 block sums live in memory (touched once per block).
KEV_AVX2 void micro_avx2(const int16_t* x, int64_t kp, const float* sx, int64_t blocks,
                         const int8_t* w, const float* sw, float* out) {
  __m256 f[kMr][2];
  for (auto& r : f) r[0] = r[1] = _mm256_setzero_ps();
  for (int64_t b = 0; b < blocks; ++b) {
    __m256i a00 = _mm256_setzero_si256(), a01 = a00, a10 = a00, a11 = a00, a20 = a00, a21 = a00,
            a30 = a00, a31 = a00, a40 = a00, a41 = a00, a50 = a00, a51 = a00;
    const int8_t* wb = w + b * kPairs * kGroup * 2;
    for (int64_t s = 0; s < kPairs; ++s) {
      const __m256i w0 =
          _mm256_cvtepi8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(wb + s * 32)));
      const __m256i w1 =
          _mm256_cvtepi8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(wb + s * 32 + 16)));
      __m256i v;
      KEV_I8_ROW(0)
      KEV_I8_ROW(1)
      KEV_I8_ROW(2)
      KEV_I8_ROW(3)
      KEV_I8_ROW(4)
      KEV_I8_ROW(5)
      // Keeps GCC 12 from reassociating the integer sums into a spilled tree.
      __asm__(""
              : "+x"(a00), "+x"(a01), "+x"(a10), "+x"(a11), "+x"(a20), "+x"(a21), "+x"(a30),
                "+x"(a31), "+x"(a40), "+x"(a41), "+x"(a50), "+x"(a51));
    }
    const __m256 s0 = _mm256_loadu_ps(sw + b * kGroup), s1 = _mm256_loadu_ps(sw + b * kGroup + 8);
    __m256 d;
    KEV_I8_SCALE(0)
    KEV_I8_SCALE(1)
    KEV_I8_SCALE(2)
    KEV_I8_SCALE(3)
    KEV_I8_SCALE(4)
    KEV_I8_SCALE(5)
  }
  for (int64_t r = 0; r < kMr; ++r) {
    _mm256_storeu_ps(out + r * kGroup, f[r][0]);
    _mm256_storeu_ps(out + r * kGroup + 8, f[r][1]);
  }
}
#undef KEV_I8_ROW
#undef KEV_I8_SCALE

void range_avx2(const int16_t* xq, int64_t kp, const float* sx, int64_t rows, const Int8Matrix& w,
                float* y, int64_t ldy, int64_t g0, int64_t g1) {
  const int64_t group_q = w.blocks * kPairs * kGroup * 2, group_s = w.blocks * kGroup;
  float out[kMr * kGroup];
  for (int64_t g = g0; g < g1; ++g) {
    const int64_t nr = std::min(kGroup, w.rows - g * kGroup);
    for (int64_t m = 0; m < rows; m += kMr) {
      micro_avx2(xq + m * kp, kp, sx + m * w.blocks, w.blocks, w.q.data() + g * group_q,
                 w.scale.data() + g * group_s, out);
      const int64_t mr = std::min(kMr, rows - m);
      for (int64_t i = 0; i < mr; ++i)
        std::memcpy(y + (m + i) * ldy + g * kGroup, out + i * kGroup,
                    static_cast<size_t>(nr) * sizeof(float));
    }
  }
}

// Positions in int8_variants().
enum Int8Index {
  kAvx2Index,
  kAvx512BwIndex,
  kAvx512VnniIndex,
  kAmxIndex,
  kAmxEmulatedIndex,
  kAvx512VnniBytesIndex,
  kAvxVnniBytesIndex
};

// The AVX-512 int8 kernel of this CPU after its probe (AVX2's when it failed); needs kAvx512.
// Not the AMX kernel, even where the CPU has it: under gemm_int8.h's per-block scales its tile
// sums go through memory at every block of 32, and it measured no faster than VNNI
// (docs/performance.md, "AMX"); KEV_INT8_KERNEL=amxint8 runs it.
int avx512_int8_choice() {
  static const int index = [] {
    const int real = cpu_has_avx512_vnni() ? kAvx512VnniIndex : kAvx512BwIndex;
    return probe_kernel(family_int8_kernel(real)) ? real : kAvx2Index;
  }();
  return index;
}

}  // namespace

std::span<const Int8Variant> int8_variants() {
  static const Int8Variant kVariants[] = {
      {"avx2", kAvx2, nullptr, &range_avx2},
      {"avx512bw", kAvx512, nullptr, &x86::int8_range_avx512_bw},
      {"avx512vnni", kAvx512, &cpu_has_avx512_vnni, &x86::int8_range_avx512_vnni},
      // Run by name only (KEV_INT8_KERNEL, tests, bench_gemm --int8-kernel).
      {"amxint8", kAvx512, &cpu_has_amx_int8, &x86::int8_range_amx},
      {"amxint8-emulated", Isa::kPortable, nullptr, &x86::int8_range_amx_emulated},
      // 8-bit activations only (w8a8); int8_byte_choice.
      {"avx512vnni-a8", kAvx512, &cpu_has_avx512_vnni, nullptr, &x86::int8_byte_range_avx512_vnni},
      {"avxvnni-a8", kAvx2, &cpu_has_avx_vnni, nullptr, &x86::int8_byte_range_avx_vnni}};
  static_assert(kAvx2Index == 0 && kAvx512BwIndex == 1 && kAvx512VnniIndex == 2 && kAmxIndex == 3 &&
                kAmxEmulatedIndex == 4 && kAvx512VnniBytesIndex == 5 && kAvxVnniBytesIndex == 6);
  return kVariants;
}

int int8_choice(Isa level) {
  if (level == kAvx512) return avx512_int8_choice();
  if (level == kAvx2) return kAvx2Index;
  return -1;
}

// vpdpbusd multiplies four byte pairs per lane where vpdpwssd multiplies two int16 pairs: at the
// AVX-512 level with AVX512_VNNI, else (AVX2, or AVX-512 without its VNNI) with AVX-VNNI's ymm
// form, each once it passed its probe. (Without either, int8_choice's kernel computes 8-bit
// activations exactly too.)
int int8_byte_choice(Isa level) {
  if (level == kAvx512 && cpu_has_avx512_vnni()) {
    static const bool passed = probe_kernel(family_int8_kernel(kAvx512VnniBytesIndex));
    if (passed) return kAvx512VnniBytesIndex;
  }
  if (level.rank() >= kAvx2.rank() && cpu_has_avx_vnni()) {
    static const bool passed = probe_kernel(family_int8_kernel(kAvxVnniBytesIndex));
    if (passed) return kAvxVnniBytesIndex;
  }
  return -1;
}

QuantizeBlock quantize_block() {
  return isa_supported(kAvx2) ? &quantize_block_avx2 : nullptr;
}

}  // namespace kev::arch
