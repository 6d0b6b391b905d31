// The Qwen3.5 hybrid text backbone on CPU: load a model directory, compute a prefix state once,
// run any number of independent rows continuing from it.
//
// Contract:
// - Model::load validates config and weights (see weights.h) and keeps the BF16 weights mapped;
//   a directory with an export manifest must pass read_bundle_manifest (formats/bundle_manifest.h).
// - Arithmetic is FP32 on BF16 weights, in fixed orders (the kernel layer's, cpu/gemm.h, and the
//   layers', src/model/); a row's result never depends on which other rows run with it, in which
//   order, or on the thread count. With GdnMode::kRecurrent (default), prefix + row gives bitwise
//   the same hidden states as prefix-then-row run as one sequence.
// - Precision (ForwardOptions::precision) picks the arithmetic of the big linear projections
//   (attention q/k/v/o, GDN in_proj_qkv / in_proj_z / out_proj, MLP gate/up/down); norms, the GDN
//   a/b gate projections, the conv and recurrence, attention scores and softmax and the
//   embedding stay FP32 in every mode. kFp32 (default) is the exact reference-parity mode above.
//   The fast modes reduce a selection of those projections, the rest staying exact FP32 (int8:
//   every projection but those of the first quarter of the layers, rounded up, and the query
//   and key rows of each GDN in_proj_qkv; bf16: every projection but those query and key rows;
//   KEV_INT8_CLASSES / KEV_BF16_CLASSES replace them, docs/environment.md): kBf16 multiplies
//   BF16-rounded activation rows (round to nearest even) with the BF16 weights, exact products
//   summed in FP32; kInt8 quantizes those weights once, blockwise symmetric (1.125 bytes per weight
//   held; their BF16 pages are released), and the activations per row and block at every call, with
//   integer dot products (kInt8 to 16 bits, kW8A8 to 8 bits: twice the byte-product rate, more
//   error; same weights and selection). Every mode keeps the batch- and thread-independence above
//   (bitwise), and kFp32, kInt8 and kW8A8 give the same bits at every instruction-set level;
//   kBf16's last bits may differ
//   between CPUs (a CPU with a BF16 dot-product unit sums in that unit's order; the kernel layer,
//   which level, cpu/precision_kernels.h). The fast modes carry a parity budget against kFp32 and
//   the float64 reference (docs/performance.md, tests/oracle/test_precision.py), not equality.
// - PrefixState is an immutable value: run_rows/extend only read it. One run_rows pass may mix
//   rows of different prefixes; a row only ever reads its own prefix's cache. A state is read
//   only by a model whose backend is of the kind that made it (another is Error(kInternal)).
// - Ids must be < vocab, positions >= 0 (default: continuing after the state, i.e. state.length,
//   state.length + 1, ...). Violations throw Error(kBadInput).
#pragma once
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "kev/formats/bundle_manifest.h"
#include "kev/model/config.h"
#include "kev/model/state_bytes.h"
#include "kev/model/weights.h"

namespace kev {

enum class GdnMode {
  kRecurrent,  // per-token recurrence: the exact reference form
  kChunked,    // chunks of 64 tokens (UT-transform form); faster on long sequences
};
// kChunked's chunk: its chunks start at multiples of this from the start of each extend() or
// row, so a state continued from a point that is not a multiple of it differs in the last bits.
constexpr int64_t kGdnChunkTokens = 64;

enum class Precision {
  kFp32,  // FP32 activations x BF16 weights: exact reference parity (default)
  kBf16,  // activations rounded to BF16 into the projections
  kInt8,  // blockwise int8 weights (int16 activations) in the projections
  kW8A8,  // the same weights with int8 activations
};
// kInt8 or kW8A8: the modes that run int8 weights (and quantized bundles).
inline bool runs_int8_weights(Precision p) {
  return p == Precision::kInt8 || p == Precision::kW8A8;
}
const char* precision_name(Precision p);  // "fp32", "bf16", "int8", "w8a8"
// The mode's arithmetic in the names torch prints ("float32", "bfloat16", "int8" for both int8
// modes): the dtype Kev 1.0's /v1/models reports (DecisionModel.dtype).
const char* torch_dtype_name(Precision p);
// Parses "fp32" | "bf16" | "int8" | "w8a8"; Error(kBadInput) otherwise.
Precision parse_precision(const std::string& name);

// The forward's passes: extend() runs a prefix in steps of prefill_step tokens (by default
// kPrefillStepTokens, a multiple of the GDN chunk); run_rows() runs rows in passes of at most
// kRowPassTokens tokens (a longer row runs alone); extend_through() runs the parts between its cuts
// in passes of whole steps up to prefill_step tokens, and extend_through_rows() its rows in the
// last of them when they fit kRowPassTokens together. A pass allocates its scratch for its tokens
// and frees it when it ends. The step changes where a long prefix can stop, never its bits.
inline constexpr size_t kPrefillStepTokens = 2048;
inline constexpr size_t kRowPassTokens = 4096;

struct ForwardOptions {
  GdnMode gdn = GdnMode::kRecurrent;
  size_t threads = 0;  // 0 = default_workers()
  Precision precision = Precision::kFp32;
  size_t prefill_step = kPrefillStepTokens;  // a positive multiple of kGdnChunkTokens
  // What runs the layers: a registered backend (src/model/backend.h; "cpu", the only one a
  // release build registers). An unknown name is Error(kBadInput).
  std::string backend = "cpu";
};

class Backend;  // src/model/backend.h

// A buffer of a state: (address, bytes of its capacity). A buffer two states share (the keys and
// values of their common positions) is listed by both with the same address.
struct StateBuffer {
  const void* address = nullptr;
  size_t bytes = 0;
};

// What a backend keeps of a prefix: the attention layers' keys/values and the GDN layers'
// recurrent states, in the backend's own memory and layout (the CPU's: src/model/cpu_state.h).
// Only a backend of the kind that made it reads it; the Model and the prefix cache see its
// buffers. Immutable once made.
class BackendState {
 public:
  virtual ~BackendState() = default;
  // Every buffer it holds, shared ones included (their bytes: StateFootprint).
  virtual std::vector<StateBuffer> buffers() const = 0;
  // Bytes of its own bookkeeping, beyond its buffers.
  virtual size_t bookkeeping_bytes() const = 0;
};

// The bytes of the buffers a state of `length` tokens holds: per_token * length + fixed (its
// bookkeeping, and the few bytes per shared block that say where a block is, aside). The
// backend's answer, from the function that sizes its allocations; the CPU's: keys and values of
// 8 * kv_heads * head_dim bytes per token per attention layer, and per GDN layer its conv history
// and recurrent state, 4 * ((conv_kernel - 1) * conv_dim + linear_value_heads * linear_key_dim *
// linear_value_dim).
struct StateFootprint {
  size_t per_token = 0, fixed = 0;
};

// The state after a prefix: its length and what the backend keeps of it. A value: copies share
// the backend's state, which nothing changes once made.
struct PrefixState {
  int64_t length = 0;
  std::shared_ptr<const BackendState> data;
};
std::vector<StateBuffer> state_buffers(const PrefixState& s);
// Bytes of all of a state's buffers (shared blocks included), plus its own bookkeeping.
size_t bytes_held(const PrefixState& s);

// Bytes of scratch a pass needs per token it runs (every workspace array of the layers, the
// hidden states it returns, and in kBf16/kInt8 the rounded activations), for memory accounting.
size_t workspace_bytes_per_token(const ModelConfig& c, Precision p);

// Full attention runs in tasks of kAttentionQueryRows query rows with the query heads of one
// key/value head; a task holds their scores against every key they read (4 bytes each) until it
// ends, and `threads` tasks run at once: the scratch that grows with the keys, per key.
inline constexpr int64_t kAttentionQueryRows = 16;
size_t attention_scratch_bytes_per_key(const ModelConfig& c, size_t threads);

struct RowRequest {
  std::vector<int32_t> ids;
  std::vector<int64_t> positions;  // empty: prefix.length + i
  std::vector<int64_t> readout;    // indices into the row to return; empty: all
};

struct RowResult {
  int64_t rows = 0;           // number of returned positions
  std::vector<float> hidden;  // [rows, hidden] final-normed hidden states
};

class Model {
 public:
  // A model directory or export bundle; a bundle's manifest is read (and what this kev does not
  // implement refused) unless the caller passes the one it has read already (score/bundle.h).
  static std::unique_ptr<Model> load(const std::string& model_dir, ForwardOptions options = {},
                                     const BundleManifest* manifest = nullptr);
  explicit Model(std::unique_ptr<ModelWeights> weights, ForwardOptions options = {});
  ~Model();

  const ModelConfig& config() const { return weights_->config(); }
  const ModelWeights& weights() const { return *weights_; }
  const ForwardOptions& options() const { return options_; }
  // What a state of this model holds per token and beside (its backend's StateFootprint).
  StateFootprint state_footprint() const;
  // Switching to kInt8 or kW8A8 quantizes the weights then (once); not concurrent with a forward. A
  // prefill_step that is not a positive multiple of kGdnChunkTokens is Error(kBadInput); another
  // backend name makes that backend (its prepared projections are made again).
  void set_options(const ForwardOptions& o);

  PrefixState empty_state() const;
  // Runs `ids` after `from` and returns the longer state; `hidden` (if not null) receives the
  // final-normed hidden states [ids.size(), hidden]. A long `ids` runs in prefill steps of
  // options().prefill_step tokens; `stop` (if given) is asked before every step after the first,
  // and true ends the call with Error(kInterrupted) (nothing returned, `from` unchanged): the safe
  // points where a long state stops when its client leaves or its server drains.
  PrefixState extend(const PrefixState& from, const std::vector<int32_t>& ids,
                     const std::vector<int64_t>& positions = {},
                     std::vector<float>* hidden = nullptr,
                     const std::function<bool()>& stop = {}) const;
  // Runs `ids` after `from` as extend() does (implicit positions) and gives the state at each cut
  // on the way: cuts are ascending offsets into ids in [1, ids.size()], the last ids.size()
  // (others are Error(kInternal)). Each part between cuts runs as extend() from the cut before
  // would run it, with the same bits in every mode; but consecutive parts share a pass up to
  // prefill_step tokens (each continuing the one before in it), so the weights stream once for
  // all the points of a short state. on_state(i, state) gets cut i's state when its pass ends,
  // before `stop` is asked again: a state stopped later keeps the points given before.
  using StateAtCut = std::function<void(size_t cut, const PrefixState& state)>;
  void extend_through(const PrefixState& from, const std::vector<int32_t>& ids,
                      const std::vector<size_t>& cuts, const StateAtCut& on_state,
                      const std::function<bool()>& stop = {}) const;
  // extend_through, then run_rows on the state at its end (the same bits), with the rows in the
  // state's last pass when that pass's tokens and theirs are at most kRowPassTokens: one stream
  // of the weights for a short state and its rows. The rows are checked (as run_rows checks
  // them) before anything runs; `stop` is also asked before rows that run after the state.
  std::vector<RowResult> extend_through_rows(const PrefixState& from,
                                             const std::vector<int32_t>& ids,
                                             const std::vector<size_t>& cuts,
                                             const StateAtCut& on_state,
                                             const std::vector<RowRequest>& rows,
                                             const std::function<bool()>& stop = {}) const;
  // A state and its rows for extend_through_rows_together: extend_through_rows' arguments, its
  // rows' results in `results`.
  struct StateJob {
    const PrefixState* from = nullptr;
    const std::vector<int32_t>* ids = nullptr;
    std::vector<size_t> cuts;
    StateAtCut on_state;
    const std::vector<RowRequest>* rows = nullptr;
    std::vector<RowResult> results;
    bool done = false;  // its pass ran: its states were given and its results are set
  };
  // Whether extend_through_rows runs a state of `state_tokens` and rows of `row_tokens` in one
  // pass (the state within one prefill step, the two within kRowPassTokens).
  bool one_pass(size_t state_tokens, size_t row_tokens) const;
  // Jobs that each run in one pass (one_pass), each as extend_through_rows runs it (the same
  // bits; a job's states given in cut order, jobs in order), sharing passes of up to
  // kRowPassTokens tokens: several short states and their rows in one stream of the weights.
  // Checks every job before anything runs (Error kBadInput; kInternal for one beyond one pass).
  // When a pass fails, the jobs of the passes before it stay done (StateJob::done).
  void extend_through_rows_together(std::vector<StateJob>& jobs) const;
  // Runs every row as its own continuation of `prefix`; rows are batched through the GEMMs.
  std::vector<RowResult> run_rows(const PrefixState& prefix,
                                  const std::vector<RowRequest>& rows) const;
  // Runs rows[i] as a continuation of *prefixes[i] (one prefix per row; rows of different
  // prefixes, e.g. of different requests, share one pass through the GEMMs). Row i's result is
  // bitwise run_rows(*prefixes[i], {rows[i]}). The prefixes must outlive the call.
  std::vector<RowResult> run_rows(const std::vector<const PrefixState*>& prefixes,
                                  const std::vector<RowRequest>& rows) const;

  // States as bytes (state_bytes.h). state_identity() names what the bytes of a state depend on
  // beside the weights and the token ids: the backend and its layout, the precision, the GDN
  // form, and in kBf16 the dot kernel (whose last bits differ between CPUs); two models with the
  // same weights and identity make and read the same bytes (fp32 and int8: on every CPU and
  // architecture). write_state writes `s` (a state of this model, length >= 1); read_state
  // reads one of `length` tokens back; a backend that cannot is Error(kUnsupported).
  std::string state_identity() const;
  void write_state(const PrefixState& s, const StateSink& out) const;
  PrefixState read_state(int64_t length, StateSource& in) const;

 private:
  // extend(), extend_through() and extend_through_rows(): the parts between the cuts in passes
  // of whole steps, then the rows (if any) into *results.
  void prefill(const PrefixState& from, const std::vector<int32_t>& ids,
               const std::vector<int64_t>& positions, const std::vector<size_t>& cuts,
               std::vector<float>* hidden, const StateAtCut& on_state,
               const std::function<bool()>& stop, const std::vector<RowRequest>* rows,
               std::vector<RowResult>* results = nullptr) const;

  std::unique_ptr<ModelWeights> weights_;
  ForwardOptions options_;
  std::unique_ptr<Backend> backend_;
};

}  // namespace kev
