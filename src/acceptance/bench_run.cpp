// kev bench's run (bench_run.h): the plan's bounds, the passes, the results file and the plot.
#include "kev/acceptance/bench_run.h"

#include <algorithm>
#include <chrono>
#include <fstream>
#include <memory>

#include "kev/core/error.h"
#include "kev/core/sha256.h"
#include "kev/core/utc_time.h"

namespace kev {
namespace {

using OrderedJson = nlohmann::ordered_json;

// The requests of the measured pass at concurrency c.
uint64_t level_requests(const BenchPlan& plan, size_t requests, size_t c) {
  return std::max<uint64_t>(uint64_t{requests} * plan.rounds, 2 * uint64_t{c});
}

OrderedJson record(const BenchRequest& r, const std::string& phase, const BenchReply& reply) {
  OrderedJson body = OrderedJson::parse(reply.body, nullptr, false);
  if (body.is_discarded() || !body.is_object()) body = {{"detail", reply.body}};
  return {{"id", r.id},
          {"phase", phase},
          {"status", reply.outcome.status},
          {"latency_ms", reply.outcome.latency_ms},
          {"response", std::move(body)}};
}

OrderedJson level_json(const LevelSummary& s) {
  OrderedJson errors = OrderedJson::object();
  for (auto [status, n] : s.errors) errors[std::to_string(status)] = n;
  return {{"phase", s.phase},
          {"concurrency", s.concurrency},
          {"requests", s.requests},
          {"ok", s.ok},
          {"errors", errors},
          {"p50_ms", s.p50_ms},
          {"p95_ms", s.p95_ms},
          {"p99_ms", s.p99_ms},
          {"mean_ms", s.mean_ms},
          {"max_ms", s.max_ms},
          {"wall_s", s.wall_s},
          {"requests_per_s", s.requests_per_s},
          {"tokens_per_s", s.tokens_per_s},
          {"ranked", s.ranked}};
}

// One pass: replies written to `out` (when open) as `phase` records, summarized.
LevelSummary measured_pass(BenchTarget& target, const BenchRun& run,
                           const std::vector<size_t>& order, size_t concurrency,
                           const std::string& phase, const std::string& label,
                           const std::string& summary_phase, std::ofstream* out) {
  double wall = 0;
  const std::vector<BenchReply> replies =
      run_bench_pass(target, run.requests, order, concurrency, label, run.progress, &wall);
  std::vector<BenchOutcome> outcomes;
  for (size_t i = 0; i < replies.size(); ++i) {
    outcomes.push_back(replies[i].outcome);
    if (out) *out << record(run.requests[order[i]], phase, replies[i]).dump() << "\n";
  }
  return summarize_level(summary_phase, concurrency, outcomes, wall);
}

}  // namespace

void check_bench_plan(const BenchPlan& plan, size_t requests, const std::string& requests_path) {
  if (plan.concurrency.empty())
    fail(ErrorKind::kBadInput, "--concurrency needs at least one level");
  if (plan.concurrency.size() > kMaxBenchLevels)
    fail(ErrorKind::kBadInput, "--concurrency: {} levels given, at most {} are allowed",
         plan.concurrency.size(), kMaxBenchLevels);
  for (size_t c : plan.concurrency)
    if (c < 1 || c > kMaxBenchConcurrency)
      fail(ErrorKind::kBadInput, "--concurrency levels are 1..{}, not {}", kMaxBenchConcurrency, c);
  if (requests > kMaxBenchPassRequests)
    fail(ErrorKind::kBadInput, "{}: {} requests, at most {} are allowed in one pass", requests_path,
         requests, kMaxBenchPassRequests);
  uint64_t total = uint64_t{plan.warmup} + requests;
  for (size_t c : plan.concurrency) {
    const uint64_t n = level_requests(plan, requests, c);
    if (n > kMaxBenchPassRequests)
      fail(ErrorKind::kBadInput,
           "--rounds {}: a pass of {} requests x {} rounds is {} requests, at most {} are allowed",
           plan.rounds, requests, plan.rounds, n, kMaxBenchPassRequests);
    total += n;
  }
  if (total > kMaxBenchRunRequests)
    fail(ErrorKind::kBadInput,
         "this run would send {} requests (warm-ups, feasibility pass and {} levels), at most {} "
         "are allowed: lower --warmup, --rounds or the --concurrency levels",
         total, plan.concurrency.size(), kMaxBenchRunRequests);
}

std::vector<LevelSummary> run_bench(BenchTarget& target, const BenchRun& run) {
  const BenchPlan& plan = run.plan;
  const size_t n_requests = run.requests.size();
  if (n_requests == 0) fail(ErrorKind::kBadInput, "{}: no requests", run.requests_path);
  check_bench_plan(plan, n_requests, run.requests_path);
  std::unique_ptr<std::ofstream> out;
  if (!run.out.empty()) {
    out = std::make_unique<std::ofstream>(run.out, std::ios::binary | std::ios::trunc);
    if (!*out) fail(ErrorKind::kIo, "{}: cannot write the results", run.out);
  }
  if (out) {
    nlohmann::json meta = {{"kev_version", KEV_VERSION},
                           {"started_at", utc_timestamp(std::chrono::system_clock::now(), false)},
                           {"requests_file", run.requests_path},
                           {"requests_sha256", sha256_file(run.requests_path)},
                           {"requests", n_requests},
                           {"warmup", plan.warmup},
                           {"rounds", plan.rounds},
                           {"concurrency", plan.concurrency},
                           {"machine", bench_machine()}};
    for (const auto& [k, v] : run.metadata.items()) meta[k] = v;
    *out << nlohmann::json{{"kev_bench", meta}}.dump() << "\n";
  }

  std::vector<size_t> order;
  for (size_t i = 0; i < plan.warmup; ++i) order.push_back(i % n_requests);
  double wall = 0;
  if (!order.empty())
    run_bench_pass(target, run.requests, order, 1, "warm-up", run.progress, &wall);

  std::vector<LevelSummary> levels;
  order.clear();
  for (size_t i = 0; i < n_requests; ++i) order.push_back(i);
  levels.push_back(
      measured_pass(target, run, order, 1, "feasibility", "feasibility", "feasibility", out.get()));
  for (size_t c : plan.concurrency) {
    order.clear();
    const uint64_t n = level_requests(plan, n_requests, c);
    for (uint64_t i = 0; i < n; ++i) order.push_back(static_cast<size_t>(i % n_requests));
    levels.push_back(measured_pass(target, run, order, c, fmt::format("c{}", c),
                                   "concurrency " + std::to_string(c), "measured", out.get()));
  }

  if (out) {
    OrderedJson ls = OrderedJson::array();
    for (const LevelSummary& s : levels) ls.push_back(level_json(s));
    *out << OrderedJson{{"kev_bench_summary",
                         {{"levels", ls},
                          {"finished_at", utc_timestamp(std::chrono::system_clock::now(), false)}}}}
                .dump()
         << "\n";
    out->close();
    if (!*out) fail(ErrorKind::kIo, "{}: cannot write the results", run.out);
  }
  if (!run.svg.empty()) {
    std::ofstream svg(run.svg, std::ios::binary | std::ios::trunc);
    svg << latency_svg(levels,
                       fmt::format("kev bench: latency of {} requests per pass", n_requests));
    svg.close();
    if (!svg) fail(ErrorKind::kIo, "{}: cannot write the plot", run.svg);
  }
  return levels;
}

}  // namespace kev
