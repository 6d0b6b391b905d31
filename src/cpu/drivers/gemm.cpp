// The BF16 x FP32 GEMM's driver (gemm.h): the variant of the level, the L2 blocking of
// activation rows and the split of outputs over threads. Names no instruction set: the tile
// kernels come from the family folder (arch::gemm) or the portable one.
#include "kev/cpu/gemm.h"

#include <algorithm>

#include "cpu/arch.h"
#include "cpu/portable/portable.h"
#include "kev/core/error.h"
#include "kev/core/threads.h"
#include "kev/cpu/model_kernels.h"

namespace kev {
namespace {

const arch::GemmVariant& variant_for(Isa isa) {
  const arch::GemmVariant* v = arch::gemm(isa);
  return v != nullptr ? *v : portable::gemm();
}

void run_range(const arch::GemmVariant& v, const float* x, int64_t rows, int64_t ldx,
               const Bf16Matrix& w, float* y, int64_t ldy, int64_t n0, int64_t n1) {
  const int64_t k_total = w.cols;
  const int64_t mr_max = v.tile_rows, nr_max = v.tile_cols;
  // Keep a block of activation rows in L2 (~384 KB) while weight rows stream past it.
  int64_t mb = std::max<int64_t>(mr_max, (384 * 1024) / std::max<int64_t>(1, k_total * 4));
  mb = std::max<int64_t>(mr_max, mb / mr_max * mr_max);
  for (int64_t m0 = 0; m0 < rows; m0 += mb) {
    int64_t m1 = std::min(rows, m0 + mb);
    for (int64_t n = n0; n < n1; n += nr_max) {
      int nr = static_cast<int>(std::min<int64_t>(nr_max, n1 - n));
      for (int64_t m = m0; m < m1; m += mr_max) {
        int mr = static_cast<int>(std::min<int64_t>(mr_max, m1 - m));
        v.tile(mr, nr)(x + m * ldx, ldx, w.data + n * k_total, k_total, k_total, y + m * ldy + n,
                       ldy);
      }
    }
  }
}

}  // namespace

Isa best_gemm_isa() {
  return model_kernels().gemm_isa();
}

void gemm_bf16_isa(Isa isa, const float* x, int64_t rows, int64_t ldx, const Bf16Matrix& w,
                   float* y, int64_t ldy, size_t threads) {
  if (!isa_supported(isa))
    fail(ErrorKind::kUnsupported, "this CPU cannot run the {} GEMM kernels", isa_name(isa));
  if (rows <= 0 || w.rows <= 0) return;
  const arch::GemmVariant& v = variant_for(isa);
  if (threads == 0) threads = default_workers();
  if (v.whole != nullptr && v.whole(x, rows, ldx, w, y, ldy, threads)) return;
  // Split output features into chunks (a multiple of the tile width); more chunks than threads
  // so uneven cores still finish together.
  const int64_t chunks = static_cast<int64_t>(threads) * 4;
  int64_t per = (w.rows + chunks - 1) / chunks;
  per = std::max<int64_t>(v.tile_cols * 4, (per + v.tile_cols - 1) / v.tile_cols * v.tile_cols);
  const int64_t count = (w.rows + per - 1) / per;
  if (count <= 1 || threads <= 1) {
    run_range(v, x, rows, ldx, w, y, ldy, 0, w.rows);
    return;
  }
  parallel_for(
      static_cast<size_t>(count),
      [&](size_t c) {
        int64_t n0 = static_cast<int64_t>(c) * per;
        run_range(v, x, rows, ldx, w, y, ldy, n0, std::min(w.rows, n0 + per));
      },
      threads);
}

void gemm_bf16(const float* x, int64_t rows, int64_t ldx, const Bf16Matrix& w, float* y,
               int64_t ldy, size_t threads) {
  gemm_bf16_isa(best_gemm_isa(), x, rows, ldx, w, y, ldy, threads);
}

}  // namespace kev
