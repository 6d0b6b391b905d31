// One pass of the layers (private to the model layer): what the layer units (attention.h,
// gdn.h, mlp.h) share while the Runner (layers.cpp) takes a batch of segments through every
// layer: the weights, the kernel table and the precision, the workspace the pass owns, the rows
// of the batch and which of them are read; and the small row operations the layers have in
// common. Every kernel goes through the pass's table (kev/cpu/model_kernels.h) and every big
// projection through project() (projections.h): nothing here names an instruction set.
//
// Facts (upstream Qwen3.5, transformers modeling_qwen3_5): RMSNorm is
// x * rsqrt(mean(x^2) + eps) * (1 + w), in FP32 (the input, post-attention, final, q_norm and
// k_norm norms). RoPE rotates the pairs (d, d + rot/2) of the first rotary_dim dims
// (rotate_half); its tables are the Runner's.
#pragma once
#include <cstddef>
#include <cstdint>
#include <vector>

#include "kev/cpu/model_kernels.h"
#include "kev/model/model.h"
#include "kev/model/weights.h"
#include "model/backend.h"
#include "model/cpu_state.h"
#include "model/projections.h"
#include "model/workspace.h"

namespace kev {

// An index or count as size_t (every one here is non-negative).
inline size_t sz(int64_t n) {
  return static_cast<size_t>(n);
}

struct LayerPass {
  LayerPass(const ModelWeights& weights, const ForwardOptions& o, const ModelKernels& kernels,
            const Int8Weights* int8_weights, const Bf16DotWeights* bf16_weights);

  const ModelWeights& w;
  const ModelConfig& c;
  const ModelKernels& k;
  const size_t threads;
  const GdnMode gdn_mode;
  const Precision precision;
  const Int8Weights* const int8;
  const Bf16DotWeights* const bf16;

  Workspace ws;
  // Rows of the batch the next step runs on: every row of every segment, until the last layer
  // of a pass that reads only some rows moves those to the front and runs on them alone.
  int64_t rows = 0;
  // When some rows are not read: the batch rows that are (ascending), and a flag per row.
  std::vector<int64_t> read_rows;
  std::vector<char> read_mask;
  // The segments' mixing order: waves of segment indices; a segment continuing another
  // (Segment::continues) runs in a later wave than it. One wave for a pass without chains.
  std::vector<std::vector<size_t>> waves;
  // Per segment, the layer's part of its extended state being built (null: not kept and not
  // continued): written by the layer's mixer before the next wave reads it.
  std::vector<LayerState*> building;

  float eps() const { return static_cast<float>(c.rms_eps); }
  // y[rows, m.rows] = x * m^T: a big projection in the pass's precision (model.h).
  void project(const float* x, int64_t ldx, const Bf16Matrix& m, float* y);
  // The same in exact FP32 whatever the precision (the small GDN gate projections).
  void project_fp32(const float* x, int64_t ldx, const Bf16Matrix& m, float* y) const;
  // Moves the read rows of buf [rows, width] to its front, in order.
  void keep_read_rows(float* buf, int64_t width) const;
};

// Layer `layer`'s state in the prefix a segment continues.
inline const LayerState& layer_in(const Segment& s, int64_t layer) {
  return cpu_state(*s.from).layers[sz(layer)];
}

// out[r] = RMSNorm(x[r]) for `rows` rows of n, with weight (1 + w) or w; rows in parallel.
void rmsnorm_rows(const ModelKernels& k, const float* x, float* out, int64_t rows, int64_t n,
                  const float* w, bool plus_one, float eps, size_t threads);
// x = RMSNorm(x) * (1 + w) for one vector (a head's query or key).
void rmsnorm_inplace(const ModelKernels& k, float* x, int64_t n, const float* w, float eps);
// RoPE of one head: pairs (i, i + half) rotated by the angles whose cos and sin are c and s.
void rope_inplace(float* x, const float* c, const float* s, int64_t half);

}  // namespace kev
