// `kev bench REQUESTS.jsonl`: replays System One requests against a running endpoint (--url, the
// bearer key from KEV_API_KEY) or an in-process bundle (--bundle): warm-ups, one feasibility pass
// (each request once, in order, at concurrency 1: the answers saved for `kev compare`), then
// measured passes at each --concurrency level. Prints p50/p95/p99 latency, requests/s, tokens/s
// and errors by status per level; writes every response and the run's metadata to --out and the
// latency distribution to --svg. docs/acceptance.md "kev bench".
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#include "cli/command.h"
#include "cli/cpu_report.h"
#include "cli/options.h"
#include "cli/scorer_flags.h"
#include "kev/acceptance/bench.h"
#include "kev/acceptance/bench_client.h"
#include "kev/acceptance/bench_run.h"
#include "kev/core/error.h"
#include "kev/core/sha256.h"
#include "kev/score/scorer.h"

namespace kev::cli {
namespace {

struct BenchOptions {
  std::string requests, url, bundle, out, svg;
  BenchPlan plan;
  double timeout_s = 300;
  bool quiet = false;
  std::string flags;  // the parsed options, for the metadata
  ScorerOptions scorer;
};

std::string errors_text(const LevelSummary& s) {
  if (s.errors.empty()) return "-";
  std::string out;
  for (auto [status, n] : s.errors)
    out += fmt::format("{}{}:{}", out.empty() ? "" : " ",
                       status == 0 ? "no-answer" : std::to_string(status), n);
  return out;
}

void print_levels(const std::vector<LevelSummary>& levels) {
  std::printf("%-12s %5s %9s %6s %9s %9s %9s %9s %10s  %s\n", "phase", "conc", "requests", "ok",
              "p50 ms", "p95 ms", "p99 ms", "req/s", "tokens/s", "errors by status");
  for (const LevelSummary& s : levels)
    std::printf("%-12s %5zu %9zu %6zu %9.2f %9.2f %9.2f %9.2f %10.1f  %s%s\n", s.phase.c_str(),
                s.concurrency, s.requests, s.ok, s.p50_ms, s.p95_ms, s.p99_ms, s.requests_per_s,
                s.tokens_per_s, errors_text(s).c_str(), s.ranked ? "" : "  (unranked)");
}

int run_bench_command(const BenchOptions& o) {
  if (o.url.empty() == o.bundle.empty())
    fail(ErrorKind::kBadInput, "give either --url (a running server) or --bundle (in-process)");
  BenchRun run;
  run.requests_path = o.requests;
  run.requests = read_bench_requests(o.requests);
  run.plan = o.plan;
  check_bench_plan(run.plan, run.requests.size(), o.requests);  // before a bundle is loaded
  run.out = o.out;
  run.svg = o.svg;
  run.progress = !o.quiet && isatty(STDERR_FILENO);
  run.metadata = {{"flags", o.flags}, {"client_cpu", cpu_report()}};
  std::unique_ptr<BenchTarget> target;
  if (!o.bundle.empty()) {
    auto b = std::make_unique<BundleTarget>(o.bundle, o.scorer);
    run.metadata["target"] = {
        {"bundle", o.bundle},
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
    run.metadata["target"] = {{"url", o.url},
                              {"endpoint", u.path},
                              {"bearer_key", key && *key ? "KEV_API_KEY (set)" : "none"},
                              {"server_models", h->get_json("/v1/models").value_or(nullptr)},
                              {"server_health", h->get_json("/health").value_or(nullptr)}};
    target = std::move(h);
  }
  const std::vector<LevelSummary> levels = run_bench(*target, run);
  print_levels(levels);
  bool all_ok = true;
  for (const LevelSummary& s : levels) all_ok = all_ok && s.ranked;
  return all_ok ? 0 : 1;
}

const bool bench_registered = register_command(
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
      app.add_option("--concurrency", o->plan.concurrency,
                     "concurrency levels of the measured passes")
          ->delimiter(',')
          ->check(whole(1, kMaxBenchConcurrency))
          ->capture_default_str();
      app.add_option("--warmup", o->plan.warmup, "warm-up requests before the feasibility pass")
          ->check(whole(0, kMaxBenchPassRequests))
          ->capture_default_str();
      app.add_option("--rounds", o->plan.rounds, "passes over the file per concurrency level")
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
        return run_bench_command(*o);
      };
    });

}  // namespace
}  // namespace kev::cli
