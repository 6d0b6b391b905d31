// One recurrent gated-delta step over a range of value columns (vec.h, gdn_step), the portable
// order every variant keeps; also the remainder columns of the vector forms. Private to the
// kernel layer.
#pragma once
#include <cstdint>

namespace kev::vec {

// Every value column j of the state is independent within a step (m[j], delta[j], o[j] and
// column j of S involve only column j), so the step runs column block by column block, a block
// of 64 columns with its m / delta / o held in fixed-size locals (vectorized without aliasing
// concerns; the dk x 64 block, 32 KiB at dk = 128, is re-read by the second pass while still
// cached); a last narrower block takes the runtime-width loop. Per element the operations and
// their order are the unblocked ones: S *= eg; m += k_i S (ascending i); delta = beta (v - m);
// S += k_i delta; o += q_i S (ascending i).
template <int64_t B>
__attribute__((always_inline)) inline void gdn_columns(float* s, int64_t dk, int64_t dv, int64_t j0,
                                                       int64_t jn, float eg, const float* k,
                                                       const float* q, const float* v, float beta,
                                                       float* o, float* m) {
  const int64_t w = B > 0 ? B : jn;
  float mb[B > 0 ? B : 1], ob[B > 0 ? B : 1];
  float* md = B > 0 ? mb : m + j0;
  float* od = B > 0 ? ob : o + j0;
  for (int64_t j = 0; j < w; ++j) md[j] = 0.0f;
  for (int64_t i = 0; i < dk; ++i) {
    float* row = s + i * dv + j0;
    const float ki = k[i];
    for (int64_t j = 0; j < w; ++j) {
      row[j] *= eg;
      md[j] += ki * row[j];
    }
  }
  for (int64_t j = 0; j < w; ++j) {
    md[j] = beta * (v[j0 + j] - md[j]);  // md now holds delta
    od[j] = 0.0f;
  }
  for (int64_t i = 0; i < dk; ++i) {
    float* row = s + i * dv + j0;
    const float ki = k[i], qi = q[i];
    for (int64_t j = 0; j < w; ++j) {
      row[j] += ki * md[j];
      od[j] += qi * row[j];
    }
  }
  if (B > 0)
    for (int64_t j = 0; j < w; ++j) o[j0 + j] = od[j], m[j0 + j] = md[j];
}

}  // namespace kev::vec
