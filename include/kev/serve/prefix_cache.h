// PrefixCache<State>: a small LRU cache of computed state prefixes, keyed by the state's
// token ids, bounded both by entry count and by the total number of cached tokens.
//
// Entries are shared_ptr<const State>: a cached prefix can never be mutated, and one handed
// out stays valid after eviction for as long as its user holds it. Thread-safe.
#pragma once
#include <cstddef>
#include <cstdint>
#include <list>
#include <memory>
#include <mutex>
#include <unordered_map>
#include <vector>

namespace kev {

struct TokenIdsHash {
  size_t operator()(const std::vector<int32_t>& ids) const noexcept {
    uint64_t h = 1469598103934665603ull;  // FNV-1a over the ids
    for (int32_t id : ids) {
      h ^= static_cast<uint32_t>(id);
      h *= 1099511628211ull;
    }
    return static_cast<size_t>(h);
  }
};

template <typename State>
class PrefixCache {
 public:
  PrefixCache(size_t max_entries, size_t max_tokens)
      : max_entries_(max_entries), max_tokens_(max_tokens) {}

  std::shared_ptr<const State> find(const std::vector<int32_t>& ids) {
    std::lock_guard lock(mutex_);
    auto it = index_.find(ids);
    if (it == index_.end()) {
      ++misses_;
      return nullptr;
    }
    lru_.splice(lru_.begin(), lru_, it->second);
    ++hits_;
    return it->second->state;
  }

  // Inserts (or refreshes) ids -> state, then evicts least recently used entries until both
  // bounds hold. A prefix longer than max_tokens is not cached at all.
  void insert(const std::vector<int32_t>& ids, std::shared_ptr<const State> state) {
    std::lock_guard lock(mutex_);
    if (max_entries_ == 0 || ids.size() > max_tokens_) return;
    if (auto it = index_.find(ids); it != index_.end()) {
      it->second->state = std::move(state);
      lru_.splice(lru_.begin(), lru_, it->second);
      return;
    }
    lru_.push_front(Entry{ids, std::move(state)});
    index_.emplace(ids, lru_.begin());
    tokens_ += ids.size();
    while (lru_.size() > max_entries_ || tokens_ > max_tokens_) evict_last();
  }

  size_t entries() const {
    std::lock_guard lock(mutex_);
    return lru_.size();
  }
  size_t tokens() const {
    std::lock_guard lock(mutex_);
    return tokens_;
  }
  uint64_t hits() const {
    std::lock_guard lock(mutex_);
    return hits_;
  }
  uint64_t misses() const {
    std::lock_guard lock(mutex_);
    return misses_;
  }
  // Entries dropped to keep within the bounds (not counting prefixes too long to cache).
  uint64_t evictions() const {
    std::lock_guard lock(mutex_);
    return evictions_;
  }

 private:
  struct Entry {
    std::vector<int32_t> ids;
    std::shared_ptr<const State> state;
  };
  void evict_last() {
    tokens_ -= lru_.back().ids.size();
    index_.erase(lru_.back().ids);
    lru_.pop_back();
    ++evictions_;
  }

  size_t max_entries_, max_tokens_;
  mutable std::mutex mutex_;
  std::list<Entry> lru_;
  std::unordered_map<std::vector<int32_t>, typename std::list<Entry>::iterator, TokenIdsHash>
      index_;
  size_t tokens_ = 0;
  uint64_t hits_ = 0, misses_ = 0, evictions_ = 0;
};

}  // namespace kev
