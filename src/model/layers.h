// The layers of the Qwen3.5 text forward (private to the model layer): one pass of a batch of
// segments, each continuing its own prefix state (or an earlier segment of the pass), through the
// embedding, every decoder layer and the final norm: the CPU backend's pass (backend.h). The Runner
// (layers.cpp) orchestrates; each layer type is its own unit: attention.h (gated full attention,
// blocked), gdn.h (the Gated DeltaNet mixer; gdn_recurrence.h its recurrent and chunked forms),
// mlp.h; layer_pass.h is what they share (the workspace, workspace.h, has one owner: the pass).
// Every kernel goes through the kernel table it is given (kev/cpu/model_kernels.h) and every big
// projection through project() (projections.h); nothing here names an instruction set. Model
// (model.cpp) cuts the work into batches and prefill steps.
#pragma once
#include <cstdint>
#include <vector>

#include "kev/cpu/model_kernels.h"
#include "kev/model/model.h"
#include "model/backend.h"
#include "model/projections.h"

namespace kev {

// The largest token position: RoPE angles (position * theta^(-2i/rot) <= position for theta
// >= 1) stay within fixed_sin/fixed_cos's range (kFixedTrigMaxArg, fixed_math.h).
inline constexpr int64_t kMaxPosition = int64_t{1} << 20;

// Runs the segments (each continuing its own `from`, which may differ between segments, or an
// earlier segment of the pass: Segment::continues) and writes the final-normed hidden states of
// the read rows into out: [R, H], segment after segment, each segment's read rows in ascending
// order (all rows: [T, H]). Work whose result is never read is skipped: in the last layer, the
// attention output of unread rows, and for unread rows the last layer's output projection, MLP
// and final norm (a state's prefill reads none); a read row's bits do not change (every step is
// per row, and a chained segment reads exactly the state a pass of its own would have been
// given). `states` (if not null) receives the extended state of each segment with keep_state.
// A `continues` that does not name an earlier segment is Error(kInternal).
// Every kernel through `kernels`.
void run_layers(const ModelWeights& w, const ForwardOptions& options, const ModelKernels& kernels,
                const Int8Weights* int8, const Bf16DotWeights* bf16, std::vector<Segment>& segs,
                std::vector<float>& out, std::vector<PrefixState>* states);

}  // namespace kev
