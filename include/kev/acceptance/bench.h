// Figures of one `kev bench` level (docs/acceptance.md "kev bench"): latency percentiles,
// throughput and errors by status, and the latency plot.
//
// Contract. From the outcomes of the requests one level sent (status 0 = no HTTP answer: the
// connection failed or timed out) and the level's wall time: p50/p95/p99/mean/max latency over
// every request (numpy.percentile's linear interpolation), requests/s = requests / wall,
// tokens/s = input tokens of the answered (200) requests / wall, errors = non-200 requests by
// status. A level with any error is reported but not ranked (ranked = false), as System1-Omni's
// leaderboard keeps a failing run visible but unranked.
#pragma once
#include <cstddef>
#include <map>
#include <string>
#include <vector>

namespace kev {

struct BenchOutcome {
  int status = 0;  // HTTP status; 0: no answer
  double latency_ms = 0;
  size_t input_tokens = 0;  // usage.input_tokens of a 200 answer
};

struct LevelSummary {
  std::string phase;  // "feasibility" or "measured"
  size_t concurrency = 1;
  size_t requests = 0, ok = 0;
  std::map<int, size_t> errors;  // status -> count (0: no answer)
  double p50_ms = 0, p95_ms = 0, p99_ms = 0, mean_ms = 0, max_ms = 0;
  double wall_s = 0, requests_per_s = 0, tokens_per_s = 0;
  bool ranked = false;
  std::vector<double> latencies_ms;  // every request, in completion-slot order
};

LevelSummary summarize_level(std::string phase, size_t concurrency,
                             const std::vector<BenchOutcome>& outcomes, double wall_s);

// The latency distribution of each level as cumulative curves (SVG 1.1, no script): x latency
// in ms, y the fraction of requests answered within it, one curve per level with its p50/p95.
std::string latency_svg(const std::vector<LevelSummary>& levels, const std::string& title);

}  // namespace kev
