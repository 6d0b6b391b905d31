// The gated full attention of an attention layer (private to the model layer), over a batch of
// segments, each continuing its own prefix state (or an earlier segment of the pass). Facts
// (upstream Qwen3.5, transformers modeling_qwen3_5): q_proj's output viewed as [heads, 2 *
// head_dim], first half query, second half gate; q_norm / k_norm per head (layer_pass.h's RMSNorm);
// RoPE on the first rotary_dim dims; the key/value head of query head h is h / (heads / kv_heads)
// (repeat_kv = repeat_interleave); scale head_dim^-0.5; softmax in FP32; the output times
// sigmoid(gate) before o_proj. For text the three mrope position streams are equal, so the
// interleaved sections give plain RoPE.
//
// The blocked plan: a task is a block of up to kAttentionQueryRows (model.h) query rows of one
// segment with the query heads of one key/value head (its "pairs", packed together), and walks
// the keys and values in blocks, so each block is read once per task and each key or value row
// serves several pairs (the kernel table's dot_block, axpy_block). Every score is still one dot
// of its own, every pair's softmax runs over its whole score vector in key order, and every
// output sums p_j v_j in key order: the bits do not depend on the blocking.
//
// Reads ws.xn and the RoPE tables, writes ws.mix (the layer's output). trimmed (the last layer,
// some rows unread): queries and outputs of the read rows only, and the output projection runs
// on them alone, moved to the front of the batch. The tasks run wave by wave (LayerPass::waves);
// a segment whose state is being built (LayerPass::building) gets its extended keys/values
// stored there before the next wave: its prefix's blocks (shared) and one of its own.
#pragma once
#include <cstdint>
#include <vector>

#include "kev/model/weights.h"
#include "model/layer_pass.h"

namespace kev {

void run_attention(LayerPass& pass, const AttentionWeights& a, int64_t layer,
                   const std::vector<Segment>& segs, bool trimmed);

}  // namespace kev
