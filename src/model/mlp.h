// The MLP of a decoder layer (private to the model layer): down(silu(gate(x)) * up(x)), the
// three projections in the pass's precision, the gated product through the kernel table.
// Reads ws.xn (the post-attention norm of the residual), writes ws.mix; uses big1 and big2.
#pragma once
#include "kev/model/weights.h"
#include "model/layer_pass.h"

namespace kev {

void run_mlp(LayerPass& pass, const LayerWeights& lw);

}  // namespace kev
