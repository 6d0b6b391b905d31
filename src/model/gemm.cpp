#include "kev/model/gemm.h"

#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <string>

#include "kev/core/error.h"
#include "kev/core/threads.h"

namespace kev {
namespace {

constexpr int kLanes = 16;

// The fixed lane-reduction tree shared by every path.
inline float reduce16(const float* l) {
  float t[8], u[4], v[2];
  for (int i = 0; i < 8; ++i) t[i] = l[i] + l[i + 8];
  for (int i = 0; i < 4; ++i) u[i] = t[i] + t[i + 4];
  for (int i = 0; i < 2; ++i) v[i] = u[i] + u[i + 2];
  return v[0] + v[1];
}

// ---- scalar (reference order, any CPU) ----
template <int MR, int NR>
void kernel_scalar(const float* x, int64_t ldx, const uint16_t* w, int64_t ldw, int64_t k_total,
                   float* y, int64_t ldy) {
  for (int i = 0; i < MR; ++i) {
    for (int j = 0; j < NR; ++j) {
      float acc[kLanes] = {};
      const float* xr = x + i * ldx;
      const uint16_t* wr = w + j * ldw;
      for (int64_t k = 0; k < k_total; ++k) {
        uint16_t b;
        std::memcpy(&b, wr + k, 2);
        uint32_t u = static_cast<uint32_t>(b) << 16;
        float wf;
        std::memcpy(&wf, &u, 4);
        acc[k % kLanes] = std::fma(xr[k], wf, acc[k % kLanes]);
      }
      y[i * ldy + j] = reduce16(acc);
    }
  }
}

// ---- AVX2: a 16-lane accumulator is two ymm registers (lanes 0-7, 8-15) ----
#define KEV_AVX2 __attribute__((target("avx2,fma")))

KEV_AVX2 inline __m256 widen8(const uint16_t* p) {
  __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p));
  return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
}

template <int MR, int NR>
KEV_AVX2 inline void avx2_step(__m256 (&lo)[MR][NR], __m256 (&hi)[MR][NR], const float* const* xp,
                               const uint16_t* const* wp) {
  __m256 wl[NR], wh[NR];
  for (int j = 0; j < NR; ++j) {
    wl[j] = widen8(wp[j]);
    wh[j] = widen8(wp[j] + 8);
  }
  for (int i = 0; i < MR; ++i) {
    __m256 xl = _mm256_loadu_ps(xp[i]), xh = _mm256_loadu_ps(xp[i] + 8);
    for (int j = 0; j < NR; ++j) {
      lo[i][j] = _mm256_fmadd_ps(xl, wl[j], lo[i][j]);
      hi[i][j] = _mm256_fmadd_ps(xh, wh[j], hi[i][j]);
    }
  }
}

template <int MR, int NR>
KEV_AVX2 void kernel_avx2(const float* x, int64_t ldx, const uint16_t* w, int64_t ldw,
                          int64_t k_total, float* y, int64_t ldy) {
  __m256 lo[MR][NR], hi[MR][NR];
  for (int i = 0; i < MR; ++i)
    for (int j = 0; j < NR; ++j) lo[i][j] = hi[i][j] = _mm256_setzero_ps();
  const float* xp[MR];
  const uint16_t* wp[NR];
  int64_t k = 0;
  for (; k + kLanes <= k_total; k += kLanes) {
    for (int i = 0; i < MR; ++i) xp[i] = x + i * ldx + k;
    for (int j = 0; j < NR; ++j) wp[j] = w + j * ldw + k;
    avx2_step<MR, NR>(lo, hi, xp, wp);
  }
  if (k < k_total) {  // zero-padded tail: 0 * 0 leaves the lane sums unchanged
    alignas(32) float xt[MR][kLanes] = {};
    alignas(32) uint16_t wt[NR][kLanes] = {};
    size_t n = static_cast<size_t>(k_total - k);
    for (int i = 0; i < MR; ++i) {
      std::memcpy(xt[i], x + i * ldx + k, n * 4);
      xp[i] = xt[i];
    }
    for (int j = 0; j < NR; ++j) {
      std::memcpy(wt[j], w + j * ldw + k, n * 2);
      wp[j] = wt[j];
    }
    avx2_step<MR, NR>(lo, hi, xp, wp);
  }
  alignas(32) float lanes[kLanes];
  for (int i = 0; i < MR; ++i)
    for (int j = 0; j < NR; ++j) {
      _mm256_store_ps(lanes, lo[i][j]);
      _mm256_store_ps(lanes + 8, hi[i][j]);
      y[i * ldy + j] = reduce16(lanes);
    }
}

// ---- AVX-512 ----
#define KEV_AVX512 __attribute__((target("avx512f,avx512bw,avx512vl,avx2,fma")))

// The zero-masked forms avoid GCC 12's false "maybe uninitialized" on the unmasked intrinsics.
KEV_AVX512 inline __m512 widen16(__m256i h) {
  const __mmask16 all = 0xFFFF;
  return _mm512_castsi512_ps(_mm512_maskz_slli_epi32(all, _mm512_maskz_cvtepu16_epi32(all, h), 16));
}

template <int MR, int NR>
KEV_AVX512 void kernel_avx512(const float* x, int64_t ldx, const uint16_t* w, int64_t ldw,
                              int64_t k_total, float* y, int64_t ldy) {
  __m512 acc[MR][NR];
  for (int i = 0; i < MR; ++i)
    for (int j = 0; j < NR; ++j) acc[i][j] = _mm512_setzero_ps();
  int64_t k = 0;
  for (; k + kLanes <= k_total; k += kLanes) {
    __m512 wv[NR];
    for (int j = 0; j < NR; ++j) {
      __m256i h = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(w + j * ldw + k));
      wv[j] = widen16(h);
    }
    for (int i = 0; i < MR; ++i) {
      __m512 xv = _mm512_loadu_ps(x + i * ldx + k);
      for (int j = 0; j < NR; ++j) acc[i][j] = _mm512_fmadd_ps(xv, wv[j], acc[i][j]);
    }
  }
  if (k < k_total) {
    __mmask16 m = static_cast<__mmask16>((1u << (k_total - k)) - 1u);
    __m512 wv[NR];
    for (int j = 0; j < NR; ++j) {
      __m256i h = _mm256_maskz_loadu_epi16(m, w + j * ldw + k);
      wv[j] = widen16(h);
    }
    for (int i = 0; i < MR; ++i) {
      __m512 xv = _mm512_maskz_loadu_ps(m, x + i * ldx + k);
      for (int j = 0; j < NR; ++j) acc[i][j] = _mm512_fmadd_ps(xv, wv[j], acc[i][j]);
    }
  }
  alignas(64) float lanes[kLanes];
  for (int i = 0; i < MR; ++i)
    for (int j = 0; j < NR; ++j) {
      _mm512_store_ps(lanes, acc[i][j]);
      y[i * ldy + j] = reduce16(lanes);
    }
}

using Kernel = void (*)(const float*, int64_t, const uint16_t*, int64_t, int64_t, float*, int64_t);

// Tile tables indexed [mr-1][nr-1] so edge tiles run the same per-output arithmetic.

template <int MR, int NR>
struct ScalarK {
  static constexpr Kernel fn = &kernel_scalar<MR, NR>;
};
template <int MR, int NR>
struct Avx2K {
  static constexpr Kernel fn = &kernel_avx2<MR, NR>;
};
template <int MR, int NR>
struct Avx512K {
  static constexpr Kernel fn = &kernel_avx512<MR, NR>;
};

template <template <int, int> class K, int MR, int NR>
struct TileSet {
  static Kernel get(int mr, int nr) {
    static const Kernel table[4][4] = {
        {K<1, 1>::fn, K<1, 2>::fn, K<1, 3>::fn, K<1, 4>::fn},
        {K<2, 1>::fn, K<2, 2>::fn, K<2, 3>::fn, K<2, 4>::fn},
        {K<3, 1>::fn, K<3, 2>::fn, K<3, 3>::fn, K<3, 4>::fn},
        {K<4, 1>::fn, K<4, 2>::fn, K<4, 3>::fn, K<4, 4>::fn},
    };
    return table[mr - 1][nr - 1];
  }
  static constexpr int kMr = MR, kNr = NR;
};

struct IsaPlan {
  Kernel (*get)(int, int);
  int mr, nr;
};

IsaPlan plan_for(Isa isa) {
  switch (isa) {
    case Isa::kAvx512:
      return {&TileSet<Avx512K, 4, 4>::get, 4, 4};
    case Isa::kAvx2:  // 2x2 tiles: 8 accumulator pairs plus operands fit 16 ymm registers
      return {&TileSet<Avx2K, 2, 2>::get, 2, 2};
    default:
      return {&TileSet<ScalarK, 1, 1>::get, 4, 4};
  }
}

void run_range(const IsaPlan& plan, const float* x, int64_t rows, int64_t ldx, const Bf16Matrix& w,
               float* y, int64_t ldy, int64_t n0, int64_t n1) {
  const int64_t k_total = w.cols;
  // Keep a block of activation rows in L2 (~384 KB) while weight rows stream past it.
  int64_t mb = std::max<int64_t>(plan.mr, (384 * 1024) / std::max<int64_t>(1, k_total * 4));
  mb = std::max<int64_t>(plan.mr, mb / plan.mr * plan.mr);
  for (int64_t m0 = 0; m0 < rows; m0 += mb) {
    int64_t m1 = std::min(rows, m0 + mb);
    for (int64_t n = n0; n < n1; n += plan.nr) {
      int nr = static_cast<int>(std::min<int64_t>(plan.nr, n1 - n));
      for (int64_t m = m0; m < m1; m += plan.mr) {
        int mr = static_cast<int>(std::min<int64_t>(plan.mr, m1 - m));
        plan.get(mr, nr)(x + m * ldx, ldx, w.data + n * k_total, k_total, k_total, y + m * ldy + n,
                         ldy);
      }
    }
  }
}

}  // namespace

Isa best_gemm_isa() {
  static const Isa best = dispatch_isa("KEV_GEMM_ISA");
  return best;
}

void gemm_bf16_isa(Isa isa, const float* x, int64_t rows, int64_t ldx, const Bf16Matrix& w,
                   float* y, int64_t ldy, size_t threads) {
  if (!isa_supported(isa))
    fail(ErrorKind::kUnsupported, "this CPU cannot run the {} GEMM kernels", isa_name(isa));
  if (rows <= 0 || w.rows <= 0) return;
  IsaPlan plan = plan_for(isa);
  if (threads == 0) threads = default_workers();
  // Split output features into chunks (a multiple of the tile width); more chunks than threads
  // so uneven cores still finish together.
  int64_t chunks = static_cast<int64_t>(threads) * 4;
  int64_t per = (w.rows + chunks - 1) / chunks;
  per = std::max<int64_t>(plan.nr * 4, (per + plan.nr - 1) / plan.nr * plan.nr);
  int64_t count = (w.rows + per - 1) / per;
  if (count <= 1 || threads <= 1) {
    run_range(plan, x, rows, ldx, w, y, ldy, 0, w.rows);
    return;
  }
  parallel_for(
      static_cast<size_t>(count),
      [&](size_t c) {
        int64_t n0 = static_cast<int64_t>(c) * per;
        run_range(plan, x, rows, ldx, w, y, ldy, n0, std::min(w.rows, n0 + per));
      },
      threads);
}

void gemm_bf16(const float* x, int64_t rows, int64_t ldx, const Bf16Matrix& w, float* y,
               int64_t ldy, size_t threads) {
  gemm_bf16_isa(best_gemm_isa(), x, rows, ldx, w, y, ldy, threads);
}

}  // namespace kev
