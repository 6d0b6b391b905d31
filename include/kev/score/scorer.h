// Scorer: the whole native Kev scoring path over one export bundle.
//
//   request JSON -> parse/validate (text/api.h) -> strict or truncating encoding (text/encoding.h)
//   -> state prefix: continued from the longest saved point its ids begin with (prefix_cache.h),
//   only the rest computed (model/model.h) -> every question as its own row continuing the
//   prefix, reading hidden states at <decide> and each </opt> -> pointer head + temperature
//   (head/pointer_head.h) -> answers (text/api.h).
//
// Saved points of each computed state (past the point it continued from): its end; a tail point
// 8 tokens before the end, or before where this request left the longer saved state it shared
// most ids with (appended text often retokenizes the last token or two; a conversation that
// rewrites a summary at its end each turn leaves each state about as far before its end as the
// one before); and a checkpoint at the last multiple of checkpoint_tokens inside it (a rewrite
// further back continues from there). checkpoint_tokens 0 saves the end only. An end or tail point
// that a longer state continued from is demoted to be evicted first: the longer state covers it.
// Points of one conversation share the attention keys/values of their common positions (a
// buffer both states list, model.h state_buffers); the cache counts a shared buffer once. A state
// continued from a saved point is bitwise the state computed in one pass (model.h: with
// GdnMode::kRecurrent from any point, in every precision; with kChunked only from multiples of its
// 64-token chunk, so the chunked form uses no other point).
//
// With ScorerOptions::state_dir, every end and tail point is also queued for the disk
// (state_store.h; checkpoints stay in memory),
// and a state that the memory cache does not cover whole first looks there for a longer point
// (one found is put in the memory cache too): a restored point is bit for bit the saved one, so
// answers do not depend on which tier a state came from.
//
// Contract: score() either returns a complete response or throws kev::Error (no partial
// answers). A cached prefix is shared immutably; a question's answer and usage (cached_tokens
// aside) do not depend on the other questions in the request or on what was cached before.
// Thread-safe: concurrent
// score() calls share the model, head, tokenizer and cache read-only / under the cache's lock.
// score_batch() scores several requests together (the states it computes and their rows in
// shared passes, the rows of states found whole in one more): every request gets bitwise the
// answers and error that score() alone would give it (latency_ms aside), and its usage but for
// cached_tokens under cache pressure (the cache sees a batch's saves in request order, but a
// request planned before the shared pass that saves an earlier request's points may still find
// a point those saves evict); one request's error never fails another's.
#pragma once
#include <atomic>
#include <chrono>
#include <cstdint>
#include <exception>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "kev/head/pointer_head.h"
#include "kev/model/model.h"
#include "kev/score/bundle.h"
#include "kev/score/prefix_cache.h"
#include "kev/score/state_store.h"
#include "kev/text/api.h"
#include "kev/text/encoding.h"
#include "kev/text/tokenizer.h"

namespace kev {

// Limits as Kev 1.0 serves (kev/model.py SERVE_MAX_STATE / SERVE_MAX_BRANCH): a state of up to
// 65,536 tokens (<state> included) and a row (state + one question) of up to 73,728; 1.0 has no
// whole-request cap, so max_input_tokens is 0 (none) unless an operator sets one. The state
// refusal carries 1.0's KEV_TRUNCATE_STATES hint. Every limit can be changed per process.
struct ScorerOptions {
  EncodeLimits limits = {.max_state = 65536, .max_row = 73728, .truncate_hint = true};
  size_t max_input_tokens = 0;           // packed tokens of one request (0: no cap, as 1.0)
  size_t cache_entries = 64;             // saved points kept (ends of states and checkpoints)
  size_t cache_tokens = 1 << 16;         // total state tokens kept
  size_t cache_bytes = size_t{2} << 30;  // total bytes of the saved points (docs/api.md)
  size_t cache_min_tokens = 0;     // shorter states are not cached (upstream KEV_PREFIX_MIN_TOKENS)
  size_t checkpoint_tokens = 512;  // checkpoint spacing inside states (0: ends of states only)
  bool exact_only = false;  // reuse only a state seen whole before, save only ends (as before)
  int decimals = 4;         // answer rounding (negative: unrounded)
  double temperature = 0;   // > 0: replaces the bundle's calibration temperature
  // usage as 1.0 ({"input_tokens","output_tokens"}, + state_tokens / state_tokens_used when
  // truncating); true adds kev's state_tokens, cached_tokens and input_tokens_details.
  bool usage_details = false;
  ForwardOptions forward;
  // Saved points on disk as well (state_store.h; needs the memory cache): "" none. Every end and
  // tail point the cache saves is also written there off the request path, and a state that the
  // memory cache does not cover whole continues from the longest point found there.
  std::string state_dir;
  uint64_t state_dir_bytes = uint64_t{16} << 30;  // the directory's bound
  double state_drain_seconds = 10;  // at the end (a drain): writing what is queued, at most
  std::function<void(const std::string&)> state_log;  // the store's log lines (none: silent)
};

struct ScoreUsage {
  size_t input_tokens = 0;       // every token of the packed encoding
  size_t state_tokens = 0;       // S, the state prefix (with <state>)
  size_t full_state_tokens = 0;  // the whole state (with <state>): > S only when truncated
  size_t cached_tokens = 0;      // leading state tokens continued from a saved point (<= S)
  bool truncated = false;
};

struct ScoreResult {
  OrderedJson response;  // {"model","answers","usage","latency_ms"[,"truncated"]}
  ScoreUsage usage;
  std::vector<std::vector<double>> probabilities;  // per question, option order (unrounded)
  std::vector<std::vector<float>> logits;          // per question: raw pointer logits (before T)
};

// One request of a score_batch() call; the request must outlive the call.
struct ScoreJob {
  const ApiRequest* request = nullptr;
  std::function<bool()> gone;  // as in score(): asked inside and after this request's state prefix
  // The request's encoding, when the caller made it already (Scorer::encode: the server sizes a
  // request's memory from it), so it is tokenized once; null: the scorer encodes it.
  std::shared_ptr<const Encoding> encoding;
};

// Either result (error null) or the exception score() would have thrown for this request alone.
struct ScoreOutcome {
  ScoreResult result;
  std::exception_ptr error;
};

class Scorer {
 public:
  Scorer(const std::string& bundle_dir, ScorerOptions options = {});  // open_bundle(dir)
  Scorer(const Bundle& bundle, ScorerOptions options = {});
  ScoreResult score(std::string_view request_json) const;
  // gone(), when given, is asked at the safe points where work can stop without leaving anything
  // half-made: inside a computed state's prefill before each pass after the first (model.h
  // extend_through: a pass of up to a prefill step, its saved points given as it ends), before
  // rows that do not run in the state's last pass, and after the state and its rows; true ->
  // Error(kInterrupted), no answer (saved points computed before it stay cached).
  ScoreResult score(const ApiRequest& request, const std::function<bool()>& gone = {}) const;
  // Scores jobs together, outcomes in job order: each request is encoded and gets its state
  // prefix (found whole in the cache, else computed with its own rows in the state's last pass;
  // the short ones in shared passes, a request that could continue from one of their points
  // looked up after they ran, as if they came one at a time) and its gone() check, then the rows
  // of every request still going whose state was found whole run in one Model::run_rows pass.
  // latency_ms of each is measured from the start of the call to its own answer.
  std::vector<ScoreOutcome> score_batch(std::span<const ScoreJob> jobs) const;

  // The upstream demo endpoints, each one job of single-question passes on the same state (its
  // prefix computed once, then cached): POST /v1/systemone/permute {"runs": [{"order",
  // "probabilities", "choice", "latency_ms"}] (order 0 as given, then random.Random(seed)
  // shuffles), "argmax_stable", "spread" {name: max - min of the rounded probabilities}} and
  // POST /v1/systemone/separate {"model","answers","usage":{"input_tokens" (summed),
  // "output_tokens"},"latency_ms" (summed, 1 decimal)}. A truncating scorer adds "truncated"
  // and usage.state_tokens / state_tokens_used to both, as upstream's truncation_marks does.
  OrderedJson permute(const PermuteRequest& request, const std::function<bool()>& gone = {}) const;
  OrderedJson separate(const ApiRequest& request, const std::function<bool()>& gone = {}) const;

  const ScorerOptions& options() const { return options_; }
  const Model& model() const { return *model_; }
  const PointerHead& head() const { return head_; }
  const Tokenizer& tokenizer() const { return tokenizer_; }
  // The request's encoding as score() makes it (the bundle's tokenizer and delimiters, the
  // scorer's limits); the same Error(kBadInput) for a request it refuses.
  Encoding encode(const ApiRequest& request) const;
  const PrefixCache<PrefixState>& cache() const { return *cache_; }
  // The saved points on disk (null without ScorerOptions::state_dir).
  StateStore* state_store() const { return store_.get(); }
  // State tokens taken from saved points / computed, over the scorer's life.
  uint64_t reused_tokens() const { return reused_tokens_.load(std::memory_order_relaxed); }
  uint64_t computed_tokens() const { return computed_tokens_.load(std::memory_order_relaxed); }

 private:
  struct Pending;    // one request between its stages (scorer.cpp)
  struct StateWork;  // what a state still needs: found whole, or its parts and points
  // The state of `ids`: found (reused: its tokens) or planned from the longest saved point
  // (reused: that point's tokens, once run).
  StateWork plan_state(const std::vector<int32_t>& ids, size_t* reused) const;
  // Runs a plan that found no whole state, saving its points, and `rows` on its state (into
  // hidden); `gone` is asked at the prefill's safe points (model.h extend_through_rows).
  std::shared_ptr<const PrefixState> run_state(StateWork& work, const std::vector<RowRequest>& rows,
                                               std::vector<RowResult>& hidden,
                                               const std::function<bool()>& gone) const;
  // A plan's parts as cuts of the ids it computes, and the callback that saves its points.
  void ready(StateWork& work) const;
  Model::StateAtCut point_saver(StateWork& work) const;
  // Short states of one batch (each one pass with its rows) computed together in shared passes.
  void run_together(const std::vector<Pending*>& group) const noexcept;
  // Puts a computed point in the memory cache and queues it for the disk.
  void save_point(std::span<const int32_t> ids, const std::shared_ptr<const PrefixState>& s,
                  PointKind kind) const;
  // usage.output_tokens as upstream counts it: tokens of json.dumps(answers) (no special tokens
  // added; added tokens in the text are matched, as the HF tokenizer does).
  size_t output_tokens(const OrderedJson& answers) const;
  void add_truncation_marks(OrderedJson& body, const ScoreUsage& usage) const;
  void prepare(Pending& p) const;
  void finish(Pending& p, std::vector<RowResult> hidden,
              std::chrono::steady_clock::time_point start) const;

  ScorerOptions options_;
  Tokenizer tokenizer_;
  Delimiters delimiters_;
  std::unique_ptr<Model> model_;
  PointerHead head_;
  std::unique_ptr<PrefixCache<PrefixState>> cache_;
  std::unique_ptr<StateStore> store_;  // after the model it reads and writes with
  mutable std::atomic<uint64_t> reused_tokens_{0}, computed_tokens_{0};
};

}  // namespace kev
