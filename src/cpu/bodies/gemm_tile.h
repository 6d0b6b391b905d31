// Pieces of the BF16 x FP32 GEMM's direct tile kernels that every variant shares (gemm.h states
// the order of operations): the 16-lane step, the table of tile kernels by edge size, and the
// zero-padded K tail. Private to the kernel layer; no instruction set here.
#pragma once
#include <cstdint>
#include <cstring>

#include "cpu/arch.h"

namespace kev::gemm_tile {

constexpr int kLanes = 16;  // k values per step: lane l takes k = l, l+16, ...

// The tile kernels of one variant for every edge shape up to 4 x 4, indexed [mr-1][nr-1], so
// edge tiles run the same per-output arithmetic as whole ones. K<MR, NR>::fn is the kernel.
template <template <int, int> class K>
arch::GemmTile tile_for(int mr, int nr) {
  static const arch::GemmTile table[4][4] = {
      {K<1, 1>::fn, K<1, 2>::fn, K<1, 3>::fn, K<1, 4>::fn},
      {K<2, 1>::fn, K<2, 2>::fn, K<2, 3>::fn, K<2, 4>::fn},
      {K<3, 1>::fn, K<3, 2>::fn, K<3, 3>::fn, K<3, 4>::fn},
      {K<4, 1>::fn, K<4, 2>::fn, K<4, 3>::fn, K<4, 4>::fn},
  };
  return table[mr - 1][nr - 1];
}

// The last, partial 16-wide k step of an MR x NR tile, copied into zero-padded buffers
// (0 * 0 leaves every lane sum unchanged). After construction xp[i] / wp[j] point at the
// buffers, ready for the variant's ordinary step.
template <int MR, int NR>
struct PaddedTail {
  alignas(64) float x[MR][kLanes] = {};
  alignas(64) uint16_t w[NR][kLanes] = {};
  PaddedTail(const float* xs, int64_t ldx, const uint16_t* ws, int64_t ldw, int64_t k,
             int64_t k_total, const float** xp, const uint16_t** wp) {
    const size_t n = static_cast<size_t>(k_total - k);
    for (int i = 0; i < MR; ++i) {
      std::memcpy(x[i], xs + i * ldx + k, n * sizeof(float));
      xp[i] = x[i];
    }
    for (int j = 0; j < NR; ++j) {
      std::memcpy(w[j], ws + j * ldw + k, n * sizeof(uint16_t));
      wp[j] = w[j];
    }
  }
};

// The K loop of an MR x NR tile kernel: step(xp, wp) once per whole 16-wide k step, in k order,
// with xp[i] / wp[j] at row i's / weight row j's k, then once on the PaddedTail of a partial last
// step. Always inlined into the variant's kernel, so a step lambda that carries the variant's
// target attribute is inlined there too.
template <int MR, int NR, typename Step>
[[gnu::always_inline]] inline void k_steps(const float* x, int64_t ldx, const uint16_t* w,
                                           int64_t ldw, int64_t k_total, const Step& step) {
  const float* xp[MR];
  const uint16_t* wp[NR];
  int64_t k = 0;
  for (; k + kLanes <= k_total; k += kLanes) {
    for (int i = 0; i < MR; ++i) xp[i] = x + i * ldx + k;
    for (int j = 0; j < NR; ++j) wp[j] = w + j * ldw + k;
    step(xp, wp);
  }
  if (k < k_total) {
    const PaddedTail<MR, NR> tail(x, ldx, w, ldw, k, k_total, xp, wp);
    step(xp, wp);
  }
}

}  // namespace kev::gemm_tile
