// `kev bench REQUESTS.jsonl`: replays System One requests against a running endpoint (--url, the
// bearer key from KEV_API_KEY) or an in-process bundle (--bundle): warm-ups, one feasibility pass
// (each request once, in order, at concurrency 1: the answers saved for `kev compare`), then
// measured passes at each --concurrency level. Prints p50/p95/p99 latency, requests/s, tokens/s
// and errors by status per level; writes every response and the run's metadata to --out and the
// latency distribution to --svg. docs/acceptance.md "kev bench".
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <ctime>
#include <fstream>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "cli/command.h"
#include "cli/cpu_report.h"
#include "cli/options.h"
#include "cli/scorer_flags.h"
#include "kev/acceptance/bench.h"
#include "kev/acceptance/bench_client.h"
#include "kev/core/error.h"
#include "kev/core/file.h"
#include "kev/core/sha256.h"
#include "kev/core/utc_time.h"
#include "kev/score/scorer.h"
#include "kev/text/api.h"
#include "kev/text/json_lines.h"

namespace kev::cli {
namespace {

// Bounds checked before any request is sent (docs/acceptance.md "kev bench"): a level's
// concurrency, the requests of one pass (warm-ups, the feasibility pass, each level), the levels
// and the requests of the whole run.
constexpr uint64_t kMaxConcurrency = 1024;
constexpr uint64_t kMaxPassRequests = 1000000;
constexpr size_t kMaxLevels = 64;
constexpr uint64_t kMaxRunRequests = 10000000;

struct BenchOptions {
  std::string requests, url, bundle, out, svg;
  std::vector<size_t> concurrency{1, 8, 16};
  size_t warmup = 2;
  size_t rounds = 2;
  double timeout_s = 300;
  bool quiet = false;
  std::string flags;  // the parsed options, for the metadata
  ScorerOptions scorer;
};

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

std::string errors_text(const LevelSummary& s) {
  if (s.errors.empty()) return "-";
  std::string out;
  for (auto [status, n] : s.errors)
    out += fmt::format("{}{}:{}", out.empty() ? "" : " ",
                       status == 0 ? "no-answer" : std::to_string(status), n);
  return out;
}

int run_bench(const BenchOptions& o) {
  if (o.url.empty() == o.bundle.empty())
    fail(ErrorKind::kBadInput, "give either --url (a running server) or --bundle (in-process)");
  if (o.concurrency.empty()) fail(ErrorKind::kBadInput, "--concurrency needs at least one level");
  if (o.concurrency.size() > kMaxLevels)
    fail(ErrorKind::kBadInput, "--concurrency: {} levels given, at most {} are allowed",
         o.concurrency.size(), kMaxLevels);
  for (size_t c : o.concurrency)
    if (c < 1 || c > kMaxConcurrency)
      fail(ErrorKind::kBadInput, "--concurrency levels are 1..{}, not {}", kMaxConcurrency, c);
  const std::vector<BenchRequest> requests = read_bench_requests(o.requests);
  // Every count of the run is known now: refuse a run beyond the bounds before sending anything.
  uint64_t total = o.warmup + requests.size();
  if (requests.size() > kMaxPassRequests)
    fail(ErrorKind::kBadInput, "{}: {} requests, at most {} are allowed in one pass", o.requests,
         requests.size(), kMaxPassRequests);
  for (size_t c : o.concurrency) {
    const uint64_t n = std::max<uint64_t>(uint64_t{requests.size()} * o.rounds, 2 * uint64_t{c});
    if (n > kMaxPassRequests)
      fail(ErrorKind::kBadInput,
           "--rounds {}: a pass of {} requests x {} rounds is {} requests, at most {} are allowed",
           o.rounds, requests.size(), o.rounds, n, kMaxPassRequests);
    total += n;
  }
  if (total > kMaxRunRequests)
    fail(ErrorKind::kBadInput,
         "this run would send {} requests (warm-ups, feasibility pass and {} levels), at most {} "
         "are allowed: lower --warmup, --rounds or the --concurrency levels",
         total, o.concurrency.size(), kMaxRunRequests);
  std::unique_ptr<std::ofstream> out;
  if (!o.out.empty()) {
    out = std::make_unique<std::ofstream>(o.out, std::ios::binary | std::ios::trunc);
    if (!*out) fail(ErrorKind::kIo, "{}: cannot write the results", o.out);
  }

  nlohmann::json meta = {{"kev_version", KEV_VERSION},
                         {"started_at", utc_timestamp(std::chrono::system_clock::now(), false)},
                         {"requests_file", o.requests},
                         {"requests_sha256", sha256_file(o.requests)},
                         {"requests", requests.size()},
                         {"warmup", o.warmup},
                         {"rounds", o.rounds},
                         {"concurrency", o.concurrency},
                         {"flags", o.flags},
                         {"client_cpu", cpu_report()},
                         {"machine", bench_machine()}};
  std::unique_ptr<BenchTarget> target;
  if (!o.bundle.empty()) {
    auto b = std::make_unique<BundleTarget>(o.bundle, o.scorer);
    meta["target"] = {{"bundle", o.bundle},
                      {"bundle_digest", "sha256:" + sha256_file(o.bundle + "/kev_export.json")},
                      {"precision", precision_name(o.scorer.forward.precision)},
                      {"threads", b->scorer().model().options().threads},
                      {"temperature", b->scorer().head().temperature()}};
    target = std::move(b);
  } else {
    const BenchUrl u = parse_bench_url(o.url);
    const char* key = std::getenv("KEV_API_KEY");
    auto h = std::make_unique<HttpTarget>(u, key ? key : "", o.timeout_s);
    // What the server says about itself (a System One server may not answer these).
    meta["target"] = {{"url", o.url},
                      {"endpoint", u.path},
                      {"bearer_key", key && *key ? "KEV_API_KEY (set)" : "none"},
                      {"server_models", h->get_json("/v1/models").value_or(nullptr)},
                      {"server_health", h->get_json("/health").value_or(nullptr)}};
    target = std::move(h);
  }
  if (out) *out << nlohmann::json{{"kev_bench", meta}}.dump() << "\n";

  const bool progress = !o.quiet && isatty(STDERR_FILENO);
  double wall = 0;
  std::vector<size_t> order;
  for (size_t i = 0; i < o.warmup; ++i) order.push_back(i % requests.size());
  if (!order.empty()) run_bench_pass(*target, requests, order, 1, "warm-up", progress, &wall);

  std::vector<LevelSummary> levels;
  order.clear();
  for (size_t i = 0; i < requests.size(); ++i) order.push_back(i);
  std::vector<BenchReply> replies =
      run_bench_pass(*target, requests, order, 1, "feasibility", progress, &wall);
  std::vector<BenchOutcome> outcomes;
  for (size_t i = 0; i < replies.size(); ++i) {
    outcomes.push_back(replies[i].outcome);
    if (out) *out << record(requests[i], "feasibility", replies[i]).dump() << "\n";
  }
  levels.push_back(summarize_level("feasibility", 1, outcomes, wall));

  for (size_t c : o.concurrency) {
    order.clear();
    const size_t n = std::max(requests.size() * o.rounds, 2 * c);
    for (size_t i = 0; i < n; ++i) order.push_back(i % requests.size());
    const std::string phase = fmt::format("c{}", c);
    replies = run_bench_pass(*target, requests, order, c, "concurrency " + std::to_string(c),
                             progress, &wall);
    outcomes.clear();
    for (size_t i = 0; i < replies.size(); ++i) {
      outcomes.push_back(replies[i].outcome);
      if (out) *out << record(requests[order[i]], phase, replies[i]).dump() << "\n";
    }
    levels.push_back(summarize_level("measured", c, outcomes, wall));
  }

  std::printf("%-12s %5s %9s %6s %9s %9s %9s %9s %10s  %s\n", "phase", "conc", "requests", "ok",
              "p50 ms", "p95 ms", "p99 ms", "req/s", "tokens/s", "errors by status");
  for (const LevelSummary& s : levels)
    std::printf("%-12s %5zu %9zu %6zu %9.2f %9.2f %9.2f %9.2f %10.1f  %s%s\n", s.phase.c_str(),
                s.concurrency, s.requests, s.ok, s.p50_ms, s.p95_ms, s.p99_ms, s.requests_per_s,
                s.tokens_per_s, errors_text(s).c_str(), s.ranked ? "" : "  (unranked)");
  if (out) {
    OrderedJson ls = OrderedJson::array();
    for (const LevelSummary& s : levels) ls.push_back(level_json(s));
    *out << OrderedJson{{"kev_bench_summary",
                         {{"levels", ls},
                          {"finished_at", utc_timestamp(std::chrono::system_clock::now(), false)}}}}
                .dump()
         << "\n";
    out->close();
    if (!*out) fail(ErrorKind::kIo, "{}: cannot write the results", o.out);
  }
  if (!o.svg.empty()) {
    std::ofstream svg(o.svg, std::ios::binary | std::ios::trunc);
    svg << latency_svg(levels,
                       fmt::format("kev bench: latency of {} requests per pass", requests.size()));
    svg.close();
    if (!svg) fail(ErrorKind::kIo, "{}: cannot write the plot", o.svg);
  }
  bool all_ok = true;
  for (const LevelSummary& s : levels) all_ok = all_ok && s.ranked;
  return all_ok ? 0 : 1;
}

const bool registered = register_command(
    "bench",
    "replay JSON Lines requests against a server (--url) or a bundle (--bundle): latency, "
    "throughput, errors, results file",
    [](CLI::App& app) {
      auto o = std::make_shared<BenchOptions>();
      app.footer(
          "Passes: --warmup requests (not measured), one feasibility pass (each request once, "
          "in order, concurrency 1: its answers are what kev compare reads from --out), then "
          "per --concurrency level max(rounds x requests, 2 x level) requests. --url takes the "
          "bearer key from KEV_API_KEY. Exit status: 0 every request answered 200, 1 some did "
          "not (the table shows which), 2 bad input, 4 a file could not be written. "
          "docs/acceptance.md.");
      app.add_option("requests", o->requests,
                     "JSON Lines of /v1/systemone requests (\"id\" and "
                     "\"labels\" fields are kept out of the request)")
          ->check(path())
          ->required();
      app.add_option("--url", o->url,
                     "server to measure: http://HOST:PORT (POSTs to /v1/systemone) or a full "
                     "endpoint URL")
          ->check(text());
      app.add_option("--bundle", o->bundle, "export bundle to measure in-process instead")
          ->check(path());
      app.add_option("--concurrency", o->concurrency, "concurrency levels of the measured passes")
          ->delimiter(',')
          ->check(whole(1, kMaxConcurrency))
          ->capture_default_str();
      app.add_option("--warmup", o->warmup, "warm-up requests before the feasibility pass")
          ->check(whole(0, kMaxPassRequests))
          ->capture_default_str();
      app.add_option("--rounds", o->rounds, "passes over the file per concurrency level")
          ->check(whole(1, 1000))
          ->capture_default_str();
      app.add_option("--timeout", o->timeout_s, "seconds to wait for one answer (--url)")
          ->check(number(0, Bound::kOpen, 86400, Bound::kClosed))
          ->capture_default_str();
      app.add_option("--out", o->out, "results file: metadata, every response, the summary")
          ->check(path());
      app.add_option("--svg", o->svg, "latency distribution per level as an SVG plot")
          ->check(path());
      add_scorer_flags(app, o->scorer);
      CLI::Option* temperature = app.get_option_no_throw("--temperature");
      CLI::Option* quiet_here = app.get_option_no_throw("--quiet");
      CLI::App* parent = app.get_parent();
      return [o, temperature, quiet_here, parent, &app] {
        CLI::Option* quiet_top = parent ? parent->get_option_no_throw("--quiet") : nullptr;
        o->quiet = (quiet_here && quiet_here->count() > 0) || (quiet_top && quiet_top->count() > 0);
        apply_temperature_env(temperature, o->scorer.temperature);
        o->flags = app.config_to_str(false, false);
        return run_bench(*o);
      };
    });

}  // namespace
}  // namespace kev::cli
