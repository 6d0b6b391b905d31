// PrefixCache<State>: saved points of computed states, keyed by the token ids they cover, looked
// up by the longest saved point whose ids begin the query (a growing state continues from the
// end of its previous turn, or from a checkpoint before a rewritten tail).
//
// Bounds: entry count, total cached tokens and total bytes. An entry's state is described by the
// caller as buffers (address, bytes); buffers that several entries share (the attention blocks
// of a common prefix) count once, for as long as any cached entry holds them; each entry adds
// 4 bytes per id for its key. An insert evicts from the cold end of the LRU order until all
// three bounds hold; an entry over a bound on its own is not cached at all.
// Eviction order: least recently used first, except that demote() sends a point to the cold end
// at once (the server demotes an end-of-state point once a longer state has continued from it:
// the longer one, more likely to be extended again, covers it). Bytes held by a State handed out
// stay allocated while its user holds it, so the process may briefly exceed max_bytes by the
// states being used.
//
// Entries are shared_ptr<const State>: a cached point can never be mutated, and one handed out
// stays valid after eviction for as long as its user holds it. Thread-safe (one mutex).
#pragma once
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <list>
#include <map>
#include <memory>
#include <mutex>
#include <span>
#include <unordered_map>
#include <vector>

#include "kev/model/model.h"  // StateBuffer: equal addresses are one shared buffer

namespace kev {

// FNV-1a over the ids; folding one id at a time gives the hash of every prefix in one pass.
constexpr uint64_t kTokenHashBasis = 1469598103934665603ull;
inline uint64_t token_hash_step(uint64_t h, int32_t id) {
  h ^= static_cast<uint32_t>(id);
  return h * 1099511628211ull;
}

struct TokenIdsHash {
  size_t operator()(const std::vector<int32_t>& ids) const noexcept {
    uint64_t h = kTokenHashBasis;
    for (int32_t id : ids) h = token_hash_step(h, id);
    return static_cast<size_t>(h);
  }
};

// What a saved point is: the end of a computed state, a point just before such an end (tail), or
// a checkpoint inside a state. Refreshing a point keeps the first of these it has been.
enum class PointKind { kEnd, kTail, kCheckpoint };

struct PrefixCacheLimits {
  size_t max_entries = 16;
  size_t max_tokens = size_t{1} << 16;
  size_t max_bytes = SIZE_MAX;
};

template <typename State>
class PrefixCache {
 public:
  // A saved point found by find_longest(): its state and the number of leading ids it covers
  // (0 and null when nothing matched).
  struct Match {
    std::shared_ptr<const State> state;
    size_t length = 0;
    PointKind kind = PointKind::kEnd;
    // Among longer saved ends of states, the one sharing the most leading ids with the query
    // (the nearest end on a tie): its length minus the shared count is how far before its end
    // the query left it (0 when no longer end shares more than `length` ids). A conversation
    // whose tail is rewritten each turn leaves each state that far before its end. A longer
    // point that the query merely ends inside (a shrinking state) does not count.
    size_t left_before_end = 0;
  };

  explicit PrefixCache(PrefixCacheLimits limits) : limits_(limits) {}
  PrefixCache(size_t max_entries, size_t max_tokens)
      : PrefixCache(PrefixCacheLimits{max_entries, max_tokens, SIZE_MAX}) {}

  // The point saved under exactly `ids`, or null.
  std::shared_ptr<const State> find(std::span<const int32_t> ids) {
    Match m = find_longest(ids, [&](size_t n) { return n == ids.size(); });
    return m.state;
  }

  // The longest saved point whose ids are a prefix of `ids` (the whole of `ids` included) and
  // whose length `usable` accepts (all, when not given). Counts one hit or one miss and makes
  // the point found the most recently used.
  Match find_longest(std::span<const int32_t> ids, const std::function<bool(size_t)>& usable = {}) {
    std::vector<uint64_t> hashes(ids.size() + 1);
    hashes[0] = kTokenHashBasis;
    for (size_t i = 0; i < ids.size(); ++i) hashes[i + 1] = token_hash_step(hashes[i], ids[i]);
    std::lock_guard lock(mutex_);
    for (auto it = lengths_.rbegin(); it != lengths_.rend(); ++it) {
      const size_t n = it->first;
      if (n > ids.size() || (usable && !usable(n))) continue;
      auto found = locate(ids.first(n), hashes[n]);
      if (found == lru_.end()) continue;
      lru_.splice(lru_.begin(), lru_, found);
      ++hits_;
      return Match{found->state, n, found->kind, left_before_end(ids, n)};
    }
    ++misses_;
    return Match{nullptr, 0, PointKind::kEnd, left_before_end(ids, 0)};
  }

  // Inserts (or refreshes) ids -> state, held in `buffers`; then evicts from the cold end until
  // every bound holds. An entry over a bound on its own is not cached.
  void insert(std::span<const int32_t> ids, std::shared_ptr<const State> state,
              std::vector<StateBuffer> buffers, PointKind kind = PointKind::kEnd) {
    size_t alone = ids.size() * sizeof(int32_t);
    for (const StateBuffer& b : buffers) alone += b.bytes;
    std::lock_guard lock(mutex_);
    if (limits_.max_entries == 0 || ids.empty() || ids.size() > limits_.max_tokens ||
        alone > limits_.max_bytes)
      return;
    const uint64_t h = hash(ids);
    if (auto it = locate(ids, h); it != lru_.end()) {
      hold(buffers);  // before releasing the old ones: shared buffers stay counted once
      release(it->buffers);
      it->state = std::move(state);
      it->buffers = std::move(buffers);
      it->kind = std::min(it->kind, kind);
      lru_.splice(lru_.begin(), lru_, it);
    } else {
      hold(buffers);
      bytes_ += ids.size() * sizeof(int32_t);
      lru_.push_front(Entry{std::vector<int32_t>(ids.begin(), ids.end()), h, std::move(state),
                            std::move(buffers), kind});
      index_.emplace(h, lru_.begin());
      ++lengths_[ids.size()];
      tokens_ += ids.size();
    }
    while (lru_.size() > limits_.max_entries || tokens_ > limits_.max_tokens ||
           bytes_ > limits_.max_bytes)
      evict_last();
  }
  // A state held in one buffer of its own, of `bytes`.
  void insert(std::span<const int32_t> ids, std::shared_ptr<const State> state, size_t bytes,
              PointKind kind = PointKind::kEnd) {
    const void* address = state.get();
    insert(ids, std::move(state), {StateBuffer{address, bytes}}, kind);
  }

  // Sends the point saved under exactly `ids` (if any) to the cold end of the eviction order.
  void demote(std::span<const int32_t> ids) {
    std::lock_guard lock(mutex_);
    if (auto it = locate(ids, hash(ids)); it != lru_.end()) lru_.splice(lru_.end(), lru_, it);
  }

  const PrefixCacheLimits& limits() const { return limits_; }
  size_t entries() const {
    std::lock_guard lock(mutex_);
    return lru_.size();
  }
  size_t tokens() const {
    std::lock_guard lock(mutex_);
    return tokens_;
  }
  size_t bytes() const {
    std::lock_guard lock(mutex_);
    return bytes_;
  }
  uint64_t hits() const {
    std::lock_guard lock(mutex_);
    return hits_;
  }
  uint64_t misses() const {
    std::lock_guard lock(mutex_);
    return misses_;
  }
  // Entries dropped to keep within the bounds (not counting entries too large to cache).
  uint64_t evictions() const {
    std::lock_guard lock(mutex_);
    return evictions_;
  }

 private:
  struct Entry {
    std::vector<int32_t> ids;
    uint64_t hash = 0;
    std::shared_ptr<const State> state;
    std::vector<StateBuffer> buffers;
    PointKind kind = PointKind::kEnd;
  };
  struct Held {
    size_t bytes = 0, entries = 0;
  };
  using Iter = typename std::list<Entry>::iterator;

  static uint64_t hash(std::span<const int32_t> ids) {
    uint64_t h = kTokenHashBasis;
    for (int32_t id : ids) h = token_hash_step(h, id);
    return h;
  }
  // The entry of exactly `ids` (compared in full, not by hash), or lru_.end(). Under the lock.
  Iter locate(std::span<const int32_t> ids, uint64_t h) {
    auto [first, last] = index_.equal_range(h);
    for (auto it = first; it != last; ++it)
      if (std::ranges::equal(it->second->ids, ids)) return it->second;
    return lru_.end();
  }
  // Under the lock: Match::left_before_end for a match of `matched` ids (one pass over the
  // longer entries, comparing ids from the start; entries <= the bounds, ids <= the query).
  size_t left_before_end(std::span<const int32_t> ids, size_t matched) const {
    size_t best = matched, margin = 0;
    for (const Entry& e : lru_) {
      if (e.kind != PointKind::kEnd || e.ids.size() <= matched) continue;
      const size_t n = std::min(e.ids.size(), ids.size());
      const size_t shared = static_cast<size_t>(
          std::mismatch(e.ids.begin(), e.ids.begin() + static_cast<std::ptrdiff_t>(n), ids.begin())
              .first -
          e.ids.begin());
      if (shared == ids.size()) continue;  // the query ends inside e: it shrank, not diverged
      if (shared > best || (shared == best && shared > matched && e.ids.size() - shared < margin)) {
        best = shared;
        margin = e.ids.size() - shared;
      }
    }
    return margin;
  }
  // Under the lock: count an entry's buffers in (a shared one once) or out.
  void hold(const std::vector<StateBuffer>& buffers) {
    for (const StateBuffer& b : buffers) {
      Held& h = held_[b.address];
      if (h.entries++ == 0) {
        h.bytes = b.bytes;
        bytes_ += b.bytes;
      }
    }
  }
  void release(const std::vector<StateBuffer>& buffers) {
    for (const StateBuffer& b : buffers) {
      auto it = held_.find(b.address);
      if (--it->second.entries == 0) {
        bytes_ -= it->second.bytes;
        held_.erase(it);
      }
    }
  }
  void evict_last() {
    Entry& e = lru_.back();
    auto [first, last] = index_.equal_range(e.hash);
    for (auto it = first; it != last; ++it)
      if (&*it->second == &e) {
        index_.erase(it);
        break;
      }
    if (auto l = lengths_.find(e.ids.size()); --l->second == 0) lengths_.erase(l);
    tokens_ -= e.ids.size();
    bytes_ -= e.ids.size() * sizeof(int32_t);
    release(e.buffers);
    lru_.pop_back();
    ++evictions_;
  }

  PrefixCacheLimits limits_;
  mutable std::mutex mutex_;
  std::list<Entry> lru_;                           // most recently used first
  std::unordered_multimap<uint64_t, Iter> index_;  // by hash of the ids
  std::map<size_t, size_t> lengths_;               // length -> entries of that length
  std::unordered_map<const void*, Held> held_;     // every buffer of a cached entry
  size_t tokens_ = 0, bytes_ = 0;
  uint64_t hits_ = 0, misses_ = 0, evictions_ = 0;
};

}  // namespace kev
