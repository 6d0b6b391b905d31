// The portable int8 GEMM: gemm_int8.h's reference order, one output at a time.
#include <algorithm>
#include <cmath>

#include "cpu/bodies/int8_layout.h"
#include "cpu/portable/portable.h"

namespace kev::portable {

void int8_range(const int16_t* xq_all, int64_t kp, const float* sx_all, int64_t rows,
                const Int8Matrix& w, float* y, int64_t ldy, int64_t g0, int64_t g1) {
  using int8_layout::kGroup;
  using int8_layout::kPairs;
  for (int64_t m = 0; m < rows; ++m) {
    const int16_t* xq = xq_all + m * kp;
    const float* sx = sx_all + m * w.blocks;
    for (int64_t n = g0 * kGroup; n < std::min(w.rows, g1 * kGroup); ++n) {
      const int64_t g = n / kGroup, j = n % kGroup;
      float acc = 0.0f;
      for (int64_t b = 0; b < w.blocks; ++b) {
        // The block's 16 pairs of this output lie 32 bytes apart (packed_offset).
        const int8_t* wb = w.q.data() + int8_layout::packed_offset(w.blocks, g, j, b * kQuantBlock);
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

}  // namespace kev::portable
