// The gated delta rule over one value head's tokens (private to the model layer), in its two
// forms: recurrent (token by token, the kernel table's gdn_steps) and chunked (kGdnChunkTokens
// tokens at a time, the UT-transform algebra of upstream's torch chunked reference). Both read
// the head's normalised q, k, its v, log-decay g and beta, continue the recurrent state S
// [dk, dv] in place and write the head's outputs. The forms differ in rounding, not in math;
// GdnMode (kev/model/model.h) picks one.
#pragma once
#include <cstdint>

#include "kev/cpu/model_kernels.h"

namespace kev {

// One value head's inputs and outputs in the pass's arrays: token t's q, k, v at
// q/k/v + t * qkv_stride, its g and beta at g/beta + t * gb_stride, its output at o + t * o_stride.
struct GdnHeadView {
  const float *q, *k, *v;
  int64_t qkv_stride;
  const float *g, *beta;
  int64_t gb_stride;
  float* o;
  int64_t o_stride;
};

// Per token: S = exp(g) S; S += k (beta (v - S^T k))^T; o = S^T q.
void gdn_recurrent(const ModelKernels& k, float* s, const GdnHeadView& h, int64_t len, int64_t dk,
                   int64_t dv);

// Within a chunk with cumulative log-decay c_i:
//   A[i][j] = beta_i (k_i . k_j) exp(c_i - c_j) for j < i; (I + A) vnew = r with
//   r_i = beta_i (v_i - exp(c_i) S^T k_i), solved by forward substitution;
//   o_i = exp(c_i) S^T q_i + sum_{j<=i} (q_i . k_j) exp(c_i - c_j) vnew_j,
//   S <- exp(c_last) S + sum_j exp(c_last - c_j) k_j vnew_j^T.
void gdn_chunked(const ModelKernels& k, float* s, const GdnHeadView& h, int64_t len, int64_t dk,
                 int64_t dv);

}  // namespace kev
