// One `kev bench` run (docs/acceptance.md "kev bench"): warm-ups, the feasibility pass (each
// request once, in order, at concurrency 1), then one measured pass per concurrency level of
// max(rounds x requests, 2 x level) requests; the results file (a metadata line, every response,
// a summary line) and the latency plot.
//
// Contract. check_bench_plan refuses (Error kBadInput, naming the option) a plan beyond the
// bounds below before anything is sent: no level, a level outside 1..kMaxBenchConcurrency, more
// than kMaxBenchLevels levels, a pass over kMaxBenchPassRequests requests, a run over
// kMaxBenchRunRequests. run_bench checks the plan, then opens --out (Error kIo when it cannot be
// written, before any request) and returns one summary per pass (feasibility first); a file or
// plot that cannot be written afterwards is Error(kIo). A target's errors are outcomes, not
// exceptions (bench_client.h). Not thread-safe: one run at a time per target.
#pragma once
#include <cstddef>
#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "kev/acceptance/bench.h"
#include "kev/acceptance/bench_client.h"

namespace kev {

inline constexpr uint64_t kMaxBenchConcurrency = 1024;
inline constexpr uint64_t kMaxBenchPassRequests = 1000000;
inline constexpr size_t kMaxBenchLevels = 64;
inline constexpr uint64_t kMaxBenchRunRequests = 10000000;

struct BenchPlan {
  std::vector<size_t> concurrency{1, 8, 16};
  size_t warmup = 2;
  size_t rounds = 2;
};

struct BenchRun {
  std::string requests_path;  // the JSON Lines file (hashed into the metadata)
  std::vector<BenchRequest> requests;
  BenchPlan plan;
  std::string out, svg;     // "" for none
  nlohmann::json metadata;  // what the caller knows (target, flags, client CPU); run adds the rest
  bool progress = false;    // redraw a progress line on stderr
};

// Refuses a plan beyond the bounds (the contract above) for a file of `requests` requests.
void check_bench_plan(const BenchPlan& plan, size_t requests, const std::string& requests_path);

std::vector<LevelSummary> run_bench(BenchTarget& target, const BenchRun& run);

}  // namespace kev
