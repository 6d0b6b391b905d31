#include "kev/model/gemm_int8.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <cstring>

#include "kev/core/bf16.h"
#include "kev/core/error.h"
#include "kev/core/kernel_order.h"
#include "kev/core/threads.h"
#include "kev/model/gemm_avx512.h"
#include "model/gemm_int8_neon.h"

#if KEV_X86
#include <immintrin.h>
#endif

namespace kev {
namespace {

constexpr int64_t kGroup = kInt8Group;
constexpr int64_t kMr = 6;  // activation rows per AVX2 tile
constexpr int64_t kPairs = kQuantBlock / 2;
constexpr float kWeightMax = 127.0f;  // int8 weights
constexpr float kActMax = 32767.0f;   // int16 activations (gemm_int8.h says why)
static_assert(kMr == kInt8TileRows, "the AVX-512 kernels read the AVX2 kernel's row padding");

// One block of the quantization rule (gemm_int8.h); n <= 32 values, the rest of q zero.
template <typename Q, typename Load>
float quantize_block(Load load, int64_t n, Q* q, float qmax) {
  float amax = 0.0f;
  for (int64_t i = 0; i < n; ++i) amax = std::max(amax, std::fabs(load(i)));
  if (!(amax >= 1e-30f)) {  // zero (or subnormal-only, or NaN) block
    for (int64_t i = 0; i < kQuantBlock; ++i) q[i] = 0;
    return 0.0f;
  }
  const float inv = qmax / amax;
  for (int64_t i = 0; i < kQuantBlock; ++i) {
    float r = i < n ? std::nearbyint(load(i) * inv) : 0.0f;
    q[i] = static_cast<Q>(std::min(qmax, std::max(-qmax, r)));
  }
  return amax / qmax;
}

template <typename Q>
void quantize_row(const float* v, int64_t n, Q* q, float* scale, float qmax) {
  const int64_t blocks = (n + kQuantBlock - 1) / kQuantBlock;
  for (int64_t b = 0; b < blocks; ++b) {
    const float* vb = v + b * kQuantBlock;
    scale[b] =
        quantize_block([vb](int64_t i) { return vb[i]; },
                       std::min(kQuantBlock, n - b * kQuantBlock), q + b * kQuantBlock, qmax);
  }
}

// Offset of weight (output j of the group, k) inside a group's packed block data.
inline int64_t packed_offset(int64_t blocks, int64_t g, int64_t j, int64_t k) {
  const int64_t b = k / kQuantBlock, s = (k % kQuantBlock) / 2, e = k % 2;
  return ((g * blocks + b) * kPairs + s) * kGroup * 2 + j * 2 + e;
}

#if KEV_X86
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

// One row by blocks with the AVX2 block quantizer (same values as quantize_row).
template <typename Q>
void quantize_row_avx2(const float* v, int64_t n, Q* q, float* scale, float qmax) {
  const int64_t blocks = (n + kQuantBlock - 1) / kQuantBlock;
  alignas(32) float pad[kQuantBlock];
  alignas(32) int32_t qi[kQuantBlock];
  for (int64_t b = 0; b < blocks; ++b) {
    const int64_t len = std::min(kQuantBlock, n - b * kQuantBlock);
    const float* src = v + b * kQuantBlock;
    if (len < kQuantBlock) {
      std::fill(pad, pad + kQuantBlock, 0.0f);
      std::copy(src, src + len, pad);
      src = pad;
    }
    scale[b] = quantize_block_avx2(src, qi, qmax);
    for (int64_t i = 0; i < kQuantBlock; ++i) q[b * kQuantBlock + i] = static_cast<Q>(qi[i]);
  }
}
#endif  // KEV_X86

// quantize_row, through the AVX2 form when `simd` (x86-64 only; the same values either way).
template <typename Q>
void quantize_row_as(bool simd, const float* v, int64_t n, Q* q, float* scale, float qmax) {
#if KEV_X86
  if (simd) return quantize_row_avx2<Q>(v, n, q, scale, qmax);
#else
  (void)simd;
#endif
  quantize_row<Q>(v, n, q, scale, qmax);
}

// Activations quantized per row: int16 [rows_padded][blocks * 32], scales [rows_padded][blocks].
struct QuantRows {
  std::vector<int16_t> q;
  std::vector<float> s;
  int64_t kp = 0, blocks = 0;
};

void quantize_activations(const float* x, int64_t rows, int64_t ldx, int64_t k_total,
                          int64_t rows_padded, bool simd, QuantRows& out, size_t threads) {
  out.blocks = (k_total + kQuantBlock - 1) / kQuantBlock;
  out.kp = out.blocks * kQuantBlock;
  out.q.assign(static_cast<size_t>(rows_padded * out.kp), 0);
  out.s.assign(static_cast<size_t>(rows_padded * out.blocks), 0.0f);
  parallel_for(
      static_cast<size_t>(rows),
      [&](size_t r) {
        const int64_t m = static_cast<int64_t>(r);
        quantize_row_as<int16_t>(simd, x + m * ldx, k_total, out.q.data() + m * out.kp,
                                 out.s.data() + m * out.blocks, kActMax);
      },
      threads);
}

// ---- portable: the reference order of gemm_int8.h ----
void range_portable(const QuantRows& a, int64_t rows, const Int8Matrix& w, float* y, int64_t ldy,
                    int64_t g0, int64_t g1) {
  for (int64_t m = 0; m < rows; ++m) {
    const int16_t* xq = a.q.data() + m * a.kp;
    const float* sx = a.s.data() + m * a.blocks;
    for (int64_t n = g0 * kGroup; n < std::min(w.rows, g1 * kGroup); ++n) {
      const int64_t g = n / kGroup, j = n % kGroup;
      float acc = 0.0f;
      for (int64_t b = 0; b < w.blocks; ++b) {
        // The block's 16 pairs of this output lie 32 bytes apart (packed_offset).
        const int8_t* wb = w.q.data() + packed_offset(w.blocks, g, j, b * kQuantBlock);
        const int16_t* xb = xq + b * kQuantBlock;
        int32_t isum = 0;
        for (int64_t p = 0; p < kPairs; ++p)
          isum += int32_t{xb[2 * p]} * int32_t{wb[p * kGroup * 2]} +
                  int32_t{xb[2 * p + 1]} * int32_t{wb[p * kGroup * 2 + 1]};
        const float sw = w.scale[static_cast<size_t>((g * w.blocks + b) * kGroup + j)];
        acc = std::fma(static_cast<float>(isum), sx[b] * sw, acc);
      }
      y[m * ldy + n] = acc;
    }
  }
}

#if KEV_X86
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

void range_avx2(const QuantRows& a, int64_t rows, const Int8Matrix& w, float* y, int64_t ldy,
                int64_t g0, int64_t g1) {
  const int64_t group_q = w.blocks * kPairs * kGroup * 2, group_s = w.blocks * kGroup;
  float out[kMr * kGroup];
  for (int64_t g = g0; g < g1; ++g) {
    const int64_t nr = std::min(kGroup, w.rows - g * kGroup);
    for (int64_t m = 0; m < rows; m += kMr) {
      micro_avx2(a.q.data() + m * a.kp, a.kp, a.s.data() + m * a.blocks, w.blocks,
                 w.q.data() + g * group_q, w.scale.data() + g * group_s, out);
      const int64_t mr = std::min(kMr, rows - m);
      for (int64_t i = 0; i < mr; ++i)
        std::memcpy(y + (m + i) * ldy + g * kGroup, out + i * kGroup,
                    static_cast<size_t>(nr) * sizeof(float));
    }
  }
}

#endif  // KEV_X86

}  // namespace

void quantize_row_int8(const float* v, int64_t n, int8_t* q, float* scale) {
  quantize_row<int8_t>(v, n, q, scale, kWeightMax);
}

Int8Matrix quantize_int8(const Bf16Matrix& w, size_t threads) {
  Int8Matrix m;
  m.rows = w.rows;
  m.cols = w.cols;
  m.blocks = (w.cols + kQuantBlock - 1) / kQuantBlock;
  m.groups = (w.rows + kGroup - 1) / kGroup;
  m.q.assign(static_cast<size_t>(m.groups * kGroup * m.blocks * kQuantBlock), 0);
  m.scale.assign(static_cast<size_t>(m.groups * m.blocks * kGroup), 0.0f);
  const bool simd = dispatch_isa("KEV_GEMM_ISA") != Isa::kPortable;  // same values either way
  parallel_for(
      static_cast<size_t>(m.groups),
      [&](size_t gi) {
        const int64_t g = static_cast<int64_t>(gi);
        std::vector<float> row(static_cast<size_t>(w.cols));
        std::vector<int8_t> q(static_cast<size_t>(m.blocks * kQuantBlock));
        std::vector<float> sc(static_cast<size_t>(m.blocks));
        for (int64_t j = 0; j < kGroup && g * kGroup + j < w.rows; ++j) {
          const uint16_t* src = w.data + (g * kGroup + j) * w.cols;
          for (int64_t k = 0; k < w.cols; ++k) {
            uint16_t h;
            std::memcpy(&h, src + k, 2);  // the mapping may be unaligned
            row[static_cast<size_t>(k)] = bf16_to_f32(h);
          }
          quantize_row_as<int8_t>(simd, row.data(), w.cols, q.data(), sc.data(), kWeightMax);
          for (int64_t b = 0; b < m.blocks; ++b) {
            m.scale[static_cast<size_t>((g * m.blocks + b) * kGroup + j)] =
                sc[static_cast<size_t>(b)];
            // The 32 values of a block are 16 pairs 32 bytes apart in the packed group.
            int8_t* dst = m.q.data() + packed_offset(m.blocks, g, j, b * kQuantBlock);
            for (int64_t p = 0; p < kPairs; ++p) {
              dst[p * kGroup * 2] = q[static_cast<size_t>(b * kQuantBlock + 2 * p)];
              dst[p * kGroup * 2 + 1] = q[static_cast<size_t>(b * kQuantBlock + 2 * p + 1)];
            }
          }
        }
      },
      threads == 0 ? default_workers() : threads);
  return m;
}

Isa best_int8_isa() {
  static const Isa best = [] {
    const Int8Kernel k = best_int8_kernel();
    if (k == Int8Kernel::kAvx512Vnni || k == Int8Kernel::kAvx512Bw) return Isa::kAvx512;
    // AVX2 (or portable) below AVX-512 or where its probe failed; aarch64: NEON (or portable)
    return isa_at_most(dispatch_isa("KEV_GEMM_ISA"), std::array{Isa::kAvx2, Isa::kNeon});
  }();
  return best;
}

void gemm_int8_isa(Isa isa, const float* x, int64_t rows, int64_t ldx, const Int8Matrix& w,
                   float* y, int64_t ldy, size_t threads) {
  if (!isa_supported(isa))
    fail(ErrorKind::kUnsupported, "this CPU cannot run the {} int8 kernels", isa_name(isa));
  gemm_int8_kernel(int8_kernel_for(isa), x, rows, ldx, w, y, ldy, threads);
}

void gemm_int8_kernel(Int8Kernel k, const float* x, int64_t rows, int64_t ldx, const Int8Matrix& w,
                      float* y, int64_t ldy, size_t threads) {
  if (!int8_kernel_supported(k))
    fail(ErrorKind::kUnsupported, "this CPU cannot run the {} int8 kernel", int8_kernel_name(k));
  if (rows <= 0 || w.rows <= 0) return;
  if (threads == 0) threads = default_workers();
  const bool tiled = k != Int8Kernel::kPortable;
  const int64_t rows_padded = tiled ? (rows + kMr - 1) / kMr * kMr : rows;
  thread_local QuantRows tl;
  QuantRows& a = tl;  // the workers must see this thread's buffer, not their own
  // The AVX2 quantizer gives the scalar one's values; the emulation may run without AVX2.
  quantize_activations(x, rows, ldx, w.cols, rows_padded, tiled && isa_supported(Isa::kAvx2), a,
                       threads);
  // Output groups in chunks, more chunks than threads so uneven cores finish together.
  const int64_t chunks = static_cast<int64_t>(threads) * 4;
  const int64_t per = std::max<int64_t>(1, (w.groups + chunks - 1) / chunks);
  const int64_t count = (w.groups + per - 1) / per;
  parallel_for(
      static_cast<size_t>(count),
      [&](size_t c) {
        const int64_t g0 = static_cast<int64_t>(c) * per, g1 = std::min(w.groups, g0 + per);
        if (k == Int8Kernel::kPortable)
          range_portable(a, rows, w, y, ldy, g0, g1);
#if KEV_X86
        else if (k == Int8Kernel::kAvx2)
          range_avx2(a, rows, w, y, ldy, g0, g1);
#endif
#if KEV_ARM64
        else if (k == Int8Kernel::kNeon)
          int8_range_neon(a.q.data(), a.kp, a.s.data(), rows, w, y, ldy, g0, g1);
#endif
        else
          int8_range_avx512(k, a.q.data(), a.kp, a.s.data(), rows, w, y, ldy, g0, g1);
      },
      threads);
}

void gemm_int8(const float* x, int64_t rows, int64_t ldx, const Int8Matrix& w, float* y,
               int64_t ldy, size_t threads) {
  gemm_int8_kernel(best_int8_kernel(), x, rows, ldx, w, y, ldy, threads);
}

}  // namespace kev
