// The portable BF16 x FP32 GEMM tile: gemm.h's order written out element by element.
#include <cmath>
#include <cstring>

#include "cpu/bodies/gemm_tile.h"
#include "cpu/bodies/kernel_order.h"
#include "cpu/portable/portable.h"

namespace kev::portable {
namespace {

using gemm_tile::kLanes;

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
      y[i * ldy + j] = tree16(acc);
    }
  }
}

template <int MR, int NR>
struct ScalarK {
  static constexpr arch::GemmTile fn = &kernel_scalar<MR, NR>;
};

}  // namespace

const arch::GemmVariant& gemm() {
  static const arch::GemmVariant v = {&gemm_tile::tile_for<ScalarK>, 4, 4, nullptr};
  return v;
}

}  // namespace kev::portable
