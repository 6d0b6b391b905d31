// The Gated DeltaNet (GDN) mixer of a linear-attention layer (private to the model layer), over a
// batch of segments, each continuing its own prefix state (or an earlier segment of the pass).
// Facts (upstream Qwen3.5, transformers modeling_qwen3_5): in_proj_qkv's output (q | k | v, all
// heads) goes through ONE causal depthwise convolution (kernel K, no bias, zero history or the
// state's last K-1 pre-convolution inputs), then SiLU, then is split; beta = sigmoid(b); g =
// -exp(A_log) * softplus(a + dt_bias); q and k L2-normalised as x * rsqrt(sum x^2 + 1e-6) (eps
// inside, added to the sum), then q * dk^-0.5; value head h uses key head h / (LV / LK)
// (repeat_interleave, not tile); the gated delta rule (gdn_recurrence.h) per value head; then a
// gated RMSNorm per head, rmsnorm(o) * w * silu(z) (weight w, not 1 + w), and out_proj.
//
// Reads ws.xn, writes ws.mix (the layer's output, [rows, hidden]). The conv and the delta rule run
// wave by wave (LayerPass::waves); a segment whose state is being built (LayerPass::building)
// gets its extended conv history and recurrent state stored there before the next wave.
#pragma once
#include <cstdint>
#include <vector>

#include "kev/model/weights.h"
#include "model/layer_pass.h"

namespace kev {

void run_gdn(LayerPass& pass, const GdnWeights& gw, int64_t layer,
             const std::vector<Segment>& segs);

}  // namespace kev
