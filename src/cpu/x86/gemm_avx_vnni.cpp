// The byte kernel "avxvnni-a8" (precision_kernels.h; 8-bit activations, `--precision w8a8`) for
// CPUs with AVX-VNNI: the body of the AVX-512 byte kernel (bodies/tile512_int8_bytes.inc) on
// pairs of 256-bit registers (bodies/ymm_pair_ops.inc), ymm vpdpbusd (VEX-encoded, no
// saturation) doing the byte products. Bit for bit the portable kernel's output (gemm_int8.h):
// the same exact int32 block sums and the same float steps per output. Chosen at the AVX2 level
// where the CPU has AVX-VNNI (x86/gemm_int8.cpp), after its start-up probe.
#include <algorithm>
#include <cstring>
#include <vector>

#include "cpu/drivers/precision_variants.h"
#include "cpu/x86/precision.h"
#include "cpu/x86/target.h"

namespace kev::x86 {
namespace {

constexpr int64_t kGroup = kInt8Group;  // outputs per packed group

#define KEV_PRIM(features) static inline __attribute__((always_inline, target(features)))

// YmmPairOps' primitives as intrinsics.
struct YmmPrims {
  using I = __m256i;
  using F = __m256;
  KEV_PRIM("avx2") I zero_i() { return _mm256_setzero_si256(); }
  KEV_PRIM("avx2") F zero_f() { return _mm256_setzero_ps(); }
  // Holds an accumulator in its register (as the AVX-512 ops' pin).
  KEV_PRIM("avx2") void pin(I& v) { __asm__("" : "+x"(v)); }
  KEV_PRIM("avx2") I bcast32(const void* p) {
    int32_t d;
    std::memcpy(&d, p, 4);
    return _mm256_set1_epi32(d);
  }
  KEV_PRIM("avx2") I load_i(const void* p) {
    return _mm256_loadu_si256(static_cast<const __m256i*>(p));
  }
  KEV_PRIM("avx2") void store_i(void* p, I v) { _mm256_storeu_si256(static_cast<__m256i*>(p), v); }
  KEV_PRIM("avx2") I unpacklo16(I a, I b) { return _mm256_unpacklo_epi16(a, b); }
  KEV_PRIM("avx2") I unpackhi16(I a, I b) { return _mm256_unpackhi_epi16(a, b); }
  KEV_PRIM("avx2,avxvnni") I dpbusd(I acc, I a, I b) { return _mm256_dpbusd_avx_epi32(acc, a, b); }
  KEV_PRIM("avx2") I sub_i(I a, I b) { return _mm256_sub_epi32(a, b); }
  KEV_PRIM("avx2") F load_f(const float* p) { return _mm256_loadu_ps(p); }
  KEV_PRIM("avx2") void store_f(float* p, F v) { _mm256_storeu_ps(p, v); }
  KEV_PRIM("avx2") F bcast_f(float v) { return _mm256_set1_ps(v); }
  // vperm2f128: the low (0x20) or the high (0x31) 128-bit halves of a and b, a's first.
  KEV_PRIM("avx2") F low_halves(F a, F b) { return _mm256_permute2f128_ps(a, b, 0x20); }
  KEV_PRIM("avx2") F high_halves(F a, F b) { return _mm256_permute2f128_ps(a, b, 0x31); }
  KEV_PRIM("avx2") F cvt_f(I v) { return _mm256_cvtepi32_ps(v); }
  KEV_PRIM("avx2") F mul_f(F a, F b) { return _mm256_mul_ps(a, b); }
  KEV_PRIM("avx2,fma") F fmadd_f(F a, F b, F c) { return _mm256_fmadd_ps(a, b, c); }
};
#undef KEV_PRIM

#define KEV_YMM_OPS static inline __attribute__((always_inline, target("avx2,fma,avxvnni")))
#include "cpu/bodies/ymm_pair_ops.inc"
#undef KEV_YMM_OPS

namespace vnni256 {
using V = YmmPairOps<YmmPrims>;
#define KEV_TARGET __attribute__((target("avx2,fma,avxvnni")))
#include "cpu/bodies/tile512_int8_bytes.inc"
#undef KEV_TARGET
}  // namespace vnni256

}  // namespace

void int8_byte_range_avx_vnni(const uint8_t* xu, int64_t kp, const float* sx, int64_t rows,
                              const Int8Matrix& w, float* y, int64_t ldy, int64_t g0, int64_t g1) {
  vnni256::int8_byte_range(xu, kp, sx, rows, w, y, ldy, g0, g1);
}

}  // namespace kev::x86
