// The gated delta rule's recurrent and chunked forms (gdn_recurrence.h).
#include "model/gdn_recurrence.h"

#include <algorithm>
#include <vector>

#include "kev/core/fixed_math.h"
#include "kev/model/model.h"

namespace kev {
namespace {

size_t gdn_size(int64_t n) {
  return static_cast<size_t>(n);
}

}  // namespace

void gdn_recurrent(const ModelKernels& k, float* s, const GdnHeadView& h, int64_t len, int64_t dk,
                   int64_t dv) {
  std::vector<float> eg(gdn_size(len)), beta(gdn_size(len));
  for (int64_t t = 0; t < len; ++t) {
    eg[gdn_size(t)] = fixed_expf(h.g[t * h.gb_stride]);
    beta[gdn_size(t)] = h.beta[t * h.gb_stride];
  }
  k.gdn_steps(s, dk, dv, len,
              {h.q, h.k, h.v, h.qkv_stride, eg.data(), beta.data(), h.o, h.o_stride});
}

void gdn_chunked(const ModelKernels& kk, float* s, const GdnHeadView& h, int64_t len, int64_t dk,
                 int64_t dv) {
  constexpr int64_t kChunk = kGdnChunkTokens;
  std::vector<float> cum(kChunk), u(gdn_size(kChunk * dv)), kd(gdn_size(dk));
  for (int64_t c0 = 0; c0 < len; c0 += kChunk) {
    const int64_t n = std::min(kChunk, len - c0);
    auto q = [&](int64_t i) { return h.q + (c0 + i) * h.qkv_stride; };
    auto k = [&](int64_t i) { return h.k + (c0 + i) * h.qkv_stride; };
    auto v = [&](int64_t i) { return h.v + (c0 + i) * h.qkv_stride; };
    auto beta = [&](int64_t i) { return h.beta[(c0 + i) * h.gb_stride]; };
    float acc = 0.0f;
    for (int64_t i = 0; i < n; ++i) {
      acc += h.g[(c0 + i) * h.gb_stride];
      cum[gdn_size(i)] = acc;
    }
    for (int64_t i = 0; i < n; ++i) {
      float* ui = u.data() + i * dv;  // becomes vnew_i
      const float bi = beta(i), ei = fixed_expf(cum[gdn_size(i)]);
      std::fill(ui, ui + dv, 0.0f);
      for (int64_t d = 0; d < dk; ++d) kk.axpy(ui, k(i)[d], s + d * dv, dv);  // S^T k_i
      for (int64_t d = 0; d < dv; ++d) ui[d] = bi * (v(i)[d] - ei * ui[d]);
      for (int64_t j = 0; j < i; ++j) {
        float aij = bi * kk.dot(k(i), k(j), dk) * fixed_expf(cum[gdn_size(i)] - cum[gdn_size(j)]);
        kk.axpy(ui, -aij, u.data() + j * dv, dv);
      }
    }
    // Outputs: inter-chunk read of the old state plus intra-chunk attention.
    for (int64_t i = 0; i < n; ++i) {
      float* o = h.o + (c0 + i) * h.o_stride;
      std::fill(o, o + dv, 0.0f);
      const float ei = fixed_expf(cum[gdn_size(i)]);
      for (int64_t d = 0; d < dk; ++d) kk.axpy(o, ei * q(i)[d], s + d * dv, dv);
      for (int64_t j = 0; j <= i; ++j) {
        float qk = kk.dot(q(i), k(j), dk) * fixed_expf(cum[gdn_size(i)] - cum[gdn_size(j)]);
        kk.axpy(o, qk, u.data() + j * dv, dv);
      }
    }
    const float last = cum[gdn_size(n - 1)];
    kk.scale(s, fixed_expf(last), dk * dv);
    for (int64_t j = 0; j < n; ++j) {
      const float ej = fixed_expf(last - cum[gdn_size(j)]);
      for (int64_t d = 0; d < dk; ++d) kd[gdn_size(d)] = ej * k(j)[d];
      for (int64_t d = 0; d < dk; ++d) kk.axpy(s + d * dv, kd[gdn_size(d)], u.data() + j * dv, dv);
    }
  }
}

}  // namespace kev
