// ServeMetrics: the counters behind `GET /metrics` (Prometheus text exposition format 0.0.4).
//
// Every update is a relaxed atomic add on a fixed slot (no lock, no allocation), so recording
// costs a few nanoseconds on any thread. Label cardinality is bounded by construction: routes
// come from the server's fixed route table plus one "other" (an unknown path, or a request whose
// request line was never read), statuses are 100..599, and nothing a client sends becomes a
// label. render() reads the slots without stopping writers: a scrape during traffic may see one
// request in a counter but not yet in a histogram; each histogram's _count is the sum of its
// own buckets, so a histogram is always self-consistent.
#pragma once
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "kev/score/state_store.h"

namespace kev {

inline constexpr const char* kMetricsContentType = "text/plain; version=0.0.4; charset=utf-8";

// Fixed upper bounds (le) plus +Inf; observe() is lock-free.
class Histogram {
 public:
  explicit Histogram(std::vector<double> bounds);
  void observe(double value);
  // Appends name_bucket{labels,le=...} (cumulative), name_sum and name_count lines.
  void write(std::string& out, std::string_view name, std::string_view labels) const;

 private:
  std::vector<double> bounds_;
  std::unique_ptr<std::atomic<uint64_t>[]> counts_;  // per bucket (not cumulative), +Inf last
  std::atomic<double> sum_{0};
};

// What the server knows at scrape time (read by the caller, not stored here).
struct MetricsSnapshot {
  size_t inflight = 0, queued = 0, connections = 0;
  const char* lifecycle = "loading";  // "loading" | "ready" | "draining"
  struct Cache {
    size_t entries = 0, tokens = 0, bytes = 0, max_bytes = 0;
    uint64_t hits = 0, misses = 0, evictions = 0, reused_tokens = 0, computed_tokens = 0;
  };
  std::optional<Cache> cache;                 // absent while the model is loading
  std::optional<StateStoreCounts> state_dir;  // absent without --state-dir (or loading)
};

class ServeMetrics {
 public:
  // routes: the labels of the server's known paths; index routes.size() is "other".
  explicit ServeMetrics(std::vector<std::string> routes);

  // The route label index of a request path (without query); other() when it is no route.
  size_t route(std::string_view path) const;
  size_t other() const;
  const std::string& route_name(size_t route) const;

  // One request answered (or given up: 408, 499), once per request.
  void request(size_t route, int status, double seconds);
  // Time a request waited in the FIFO queue for a scoring slot.
  void queue_wait(double seconds);
  // One model pass that scored `requests` requests together. Without cross-request batching
  // every pass is one request; a batching worker calls this once per pass with its size.
  void batch(size_t requests);
  // One request scored (200): the tokens it encoded to and how many of its state tokens were
  // continued from a saved point.
  void scored(size_t state_tokens, size_t row_tokens, size_t questions, size_t cached_tokens);
  void model_loaded(double seconds);

  std::string render(const MetricsSnapshot& now) const;

 private:
  static constexpr int kMinStatus = 100, kMaxStatus = 599;
  std::atomic<uint64_t>& status_slot(size_t route, int status) const;

  std::vector<std::string> routes_;  // then "other", last
  std::unique_ptr<std::atomic<uint64_t>[]> statuses_;
  std::vector<std::unique_ptr<Histogram>> latency_;  // per route
  Histogram queue_wait_, batch_, state_tokens_, row_tokens_;
  std::atomic<uint64_t> questions_{0}, cached_state_tokens_{0}, scored_cached_{0},
      scored_computed_{0};
  std::atomic<double> load_seconds_{-1};
  double start_time_;  // Unix seconds
};

}  // namespace kev
