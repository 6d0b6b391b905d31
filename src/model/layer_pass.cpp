// The pass's projections and row operations (layer_pass.h).
#include "model/layer_pass.h"

#include <cmath>
#include <cstring>

#include "kev/core/threads.h"

namespace kev {

LayerPass::LayerPass(const ModelWeights& weights, const ForwardOptions& o,
                     const ModelKernels& kernels, const Int8Weights* int8_weights,
                     const Bf16DotWeights* bf16_weights)
    : w(weights),
      c(weights.config()),
      k(kernels),
      threads(o.threads ? o.threads : default_workers()),
      gdn_mode(o.gdn),
      precision(o.precision),
      int8(int8_weights),
      bf16(bf16_weights) {}

void LayerPass::project(const float* x, int64_t ldx, const Bf16Matrix& m, float* y) {
  kev::project(k, precision, int8, bf16, x, rows, ldx, m, y, threads, ws.rounded);
}

void LayerPass::project_fp32(const float* x, int64_t ldx, const Bf16Matrix& m, float* y) const {
  k.gemm(x, rows, ldx, m, y, m.rows, threads);
}

void LayerPass::keep_read_rows(float* buf, int64_t width) const {
  for (size_t j = 0; j < read_rows.size(); ++j) {
    const int64_t from = read_rows[j], to = static_cast<int64_t>(j);
    if (from != to) std::memmove(buf + to * width, buf + from * width, sz(width) * 4);
  }
}

void rmsnorm_rows(const ModelKernels& k, const float* x, float* out, int64_t rows, int64_t n,
                  const float* w, bool plus_one, float eps, size_t threads) {
  parallel_for(
      sz(rows),
      [&](size_t r) {
        const float* xr = x + static_cast<int64_t>(r) * n;
        float* o = out + static_cast<int64_t>(r) * n;
        float inv = 1.0f / std::sqrt(k.sum_sq(xr, n) / static_cast<float>(n) + eps);
        for (int64_t i = 0; i < n; ++i) o[i] = xr[i] * inv * (plus_one ? 1.0f + w[i] : w[i]);
      },
      threads);
}

void rmsnorm_inplace(const ModelKernels& k, float* x, int64_t n, const float* w, float eps) {
  float inv = 1.0f / std::sqrt(k.sum_sq(x, n) / static_cast<float>(n) + eps);
  for (int64_t i = 0; i < n; ++i) x[i] = x[i] * inv * (1.0f + w[i]);
}

void rope_inplace(float* x, const float* c, const float* s, int64_t half) {
  for (int64_t i = 0; i < half; ++i) {
    float x1 = x[i], x2 = x[i + half];
    x[i] = x1 * c[i] - x2 * s[i];
    x[i + half] = x2 * c[i] + x1 * s[i];
  }
}

}  // namespace kev
