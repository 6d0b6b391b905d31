// Memory admission (admission_memory.h): the per-request formula, the default budget, and the
// budget the scoring workers share.
#include "serve/admission_memory.h"

#include "kev/core/threads.h"

#include <algorithm>
#include <fstream>
#include <string>

namespace kev {

RequestMemory RequestMemory::of(const Model& model) {
  const ModelConfig& c = model.config();
  const ForwardOptions& o = model.options();
  const StateFootprint state = model.state_footprint();
  RequestMemory m;
  m.prefill_step = o.prefill_step;
  m.kv_per_token = state.per_token;
  m.state_fixed = 4 * state.fixed;
  m.workspace_per_token = workspace_bytes_per_token(c, o.precision);
  m.attention_per_key =
      attention_scratch_bytes_per_key(c, o.threads > 0 ? o.threads : default_workers());
  return m;
}

size_t RequestMemory::need(size_t state_tokens, size_t branch_tokens, size_t longest_branch) const {
  const size_t prefill = std::min(state_tokens, prefill_step);
  const size_t rows = std::min(branch_tokens, std::max(kRowPassTokens, longest_branch));
  // A computed state's last pass takes the rows in when they fit one row pass together.
  const size_t fused = std::min(prefill + branch_tokens, kRowPassTokens);
  // A query reads at most the state and its own branch: the attention scratch's widest row.
  return kv_per_token * state_tokens + state_fixed +
         workspace_per_token * std::max({prefill, rows, fused}) +
         attention_per_key * (state_tokens + longest_branch);
}

namespace {

// The first number on the line of `path` that starts with `key`, times `unit`; 0 if none.
size_t read_number(const char* path, const std::string& key, size_t unit) {
  std::ifstream in(path);
  std::string line;
  while (std::getline(in, line)) {
    if (line.compare(0, key.size(), key) != 0) continue;
    const size_t at = line.find_first_of("0123456789", key.size());
    if (at == std::string::npos) return 0;  // "max": no limit
    try {
      return static_cast<size_t>(std::stoull(line.substr(at))) * unit;
    } catch (...) {
      return 0;
    }
  }
  return 0;
}

}  // namespace

size_t default_memory_budget(size_t cache_bytes) {
  size_t total = read_number("/proc/meminfo", "MemTotal:", 1024);
  const size_t cgroup = read_number("/sys/fs/cgroup/memory.max", "", 1);
  if (cgroup > 0 && (total == 0 || cgroup < total)) total = cgroup;
  constexpr size_t kFloor = size_t{256} << 20;
  const size_t half = total / 2;
  return half > cache_bytes + kFloor ? half - cache_bytes : kFloor;
}

bool MemoryBudget::acquire(size_t bytes, Clock::time_point deadline) {
  std::unique_lock lock(mutex_);
  const unsigned long long ticket = next_ticket_++;
  ++waiting_;
  const bool got = cv_.wait_until(
      lock, deadline, [&] { return serving_ == ticket && reserved_ + bytes <= budget_; });
  --waiting_;
  if (serving_ == ticket) {
    ++serving_;
  } else {
    // Gave up before its turn: the tickets after it must not wait for it. Its turn is taken
    // over when it comes (skipped below).
    skipped_.push_back(ticket);
  }
  while (std::find(skipped_.begin(), skipped_.end(), serving_) != skipped_.end()) {
    skipped_.erase(std::find(skipped_.begin(), skipped_.end(), serving_));
    ++serving_;
  }
  if (got) reserved_ += bytes;
  cv_.notify_all();
  return got;
}

void MemoryBudget::release(size_t bytes) {
  {
    std::lock_guard lock(mutex_);
    reserved_ -= std::min(bytes, reserved_);
  }
  cv_.notify_all();
}

MemoryBudget::Now MemoryBudget::now() const {
  std::lock_guard lock(mutex_);
  return {budget_, reserved_, waiting_};
}

}  // namespace kev
