// Memory admission (docs/serving.md "Memory"): what scoring a request holds, and the budget the
// requests being scored share.
//
// RequestMemory: bytes one request holds while it is scored, from the model (the state's bytes
// as its backend allocates them, Model::state_footprint; the pass's scratch from its widths):
//   need = kv_per_token * S + state_fixed + workspace_per_token * pass_tokens
//          + attention_per_key * (S + longest branch)
// S the state's tokens (<state> included; all of them, even those continued from a saved point),
// kv_per_token the state's bytes per token (the attention keys and values), state_fixed four times
// its fixed bytes, every GDN layer's conv and recurrent state (a pass holds the state it continues
// and up to three it makes: a checkpoint, a tail point and the end), and the scratch of the widest
// pass the request runs: its prefill steps (at most the model's prefill step), its rows (all its
// branch tokens, at most kRowPassTokens unless one branch is longer) or a state's last step with
// its rows (at most kRowPassTokens), and the attention scores of the tasks running at
// once, which grow with the keys a query reads (attention_scratch_bytes_per_key). An upper bound of
// what the forward allocates for it (model.h), beside the weights, the saved points (--cache-bytes)
// and the bodies.
//
// MemoryBudget: bytes reserved by the batches being scored, never over the budget. Thread-safe.
#pragma once
#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <mutex>
#include <vector>

#include "kev/model/config.h"
#include "kev/model/model.h"

namespace kev {

struct RequestMemory {
  size_t kv_per_token = 0, state_fixed = 0, workspace_per_token = 0;
  size_t attention_per_key = 0;  // attention_scratch_bytes_per_key at the model's threads
  size_t prefill_step = kPrefillStepTokens;  // the model's (ForwardOptions::prefill_step)

  static RequestMemory of(const Model& model);
  // state_tokens: S; branch_tokens: every branch added up; longest_branch: the longest one.
  size_t need(size_t state_tokens, size_t branch_tokens, size_t longest_branch) const;
};

// The default budget: half the machine's memory (the cgroup's limit when lower: MemTotal of
// /proc/meminfo, memory.max of cgroup v2), less `cache_bytes`; at least 256 MiB.
size_t default_memory_budget(size_t cache_bytes);

class MemoryBudget {
 public:
  using Clock = std::chrono::steady_clock;
  struct Now {
    size_t budget = 0, reserved = 0, waiting = 0;
  };

  explicit MemoryBudget(size_t bytes) : budget_(bytes) {}
  size_t budget() const { return budget_; }
  // Reserves `bytes` (<= budget()) once they fit beside what is reserved; false at `deadline`.
  // Waiters are served in arrival order (a large request is not starved by small ones).
  bool acquire(size_t bytes, Clock::time_point deadline);
  void release(size_t bytes);
  Now now() const;

 private:
  const size_t budget_;
  mutable std::mutex mutex_;
  std::condition_variable cv_;
  size_t reserved_ = 0;
  size_t waiting_ = 0;
  unsigned long long next_ticket_ = 0, serving_ = 0;  // FIFO among waiters
  std::vector<unsigned long long> skipped_;           // tickets that gave up before their turn
};

}  // namespace kev
