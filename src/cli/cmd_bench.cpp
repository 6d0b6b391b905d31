// `kev bench REQUESTS.jsonl`: replays System One requests against a running endpoint (--url, the
// bearer key from KEV_API_KEY) or an in-process bundle (--bundle): warm-ups, one feasibility pass
// (each request once, in order, at concurrency 1: the answers saved for `kev compare`), then
// measured passes at each --concurrency level. Prints p50/p95/p99 latency, requests/s, tokens/s
// and errors by status per level; writes every response and the run's metadata to --out and the
// latency distribution to --svg. docs/acceptance.md "kev bench".
#include <sys/utsname.h>
#include <unistd.h>

#include <atomic>
#include <utility>  // before Asio: its awaitable.hpp uses std::exchange
//
#include <boost/asio.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
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
#include "kev/core/error.h"
#include "kev/core/file.h"
#include "kev/core/sha256.h"
#include "kev/core/utc_time.h"
#include "kev/score/scorer.h"
#include "kev/text/api.h"
#include "kev/text/json_lines.h"

namespace kev::cli {
namespace {

namespace beast = boost::beast;
namespace http = beast::http;
namespace asio = boost::asio;

// Bounds checked before any request is sent (docs/acceptance.md "kev bench"): a level's
// concurrency, the requests of one pass (warm-ups, the feasibility pass, each level), the levels
// and the requests of the whole run.
constexpr uint64_t kMaxConcurrency = 1024;
constexpr uint64_t kMaxPassRequests = 1000000;
constexpr size_t kMaxLevels = 64;
constexpr uint64_t kMaxRunRequests = 10000000;
constexpr uint64_t kMaxAnswerBytes = uint64_t{64} << 20;  // one answer body (--url)

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

struct Request {
  std::string id;    // "id" of the line, else its line number
  std::string body;  // the request without "id" / "labels"
};

struct Reply {
  BenchOutcome outcome;
  std::string body;
};

std::vector<Request> read_requests(const std::string& path) {
  std::vector<Request> out;
  for_each_json_line(path, JsonLimits{}, [&](OrderedJson& o, size_t line) {
    if (!o.is_object()) fail(ErrorKind::kBadInput, "a request is a JSON object");
    Request r;
    r.id = std::to_string(line);
    if (auto it = o.find("id"); it != o.end()) {
      r.id = it->is_string() ? it->get<std::string>() : it->dump();
      o.erase("id");
    }
    o.erase("labels");
    r.body = o.dump();
    out.push_back(std::move(r));
  });
  if (out.empty()) fail(ErrorKind::kBadInput, "{}: no request", path);
  return out;
}

size_t input_tokens_of(const std::string& body) {
  const auto j = nlohmann::json::parse(body, nullptr, false);
  if (!j.is_object()) return 0;
  auto u = j.find("usage");
  if (u == j.end() || !u->is_object()) return 0;
  auto t = u->find("input_tokens");
  return t != u->end() && t->is_number_unsigned() ? t->get<size_t>() : 0;
}

class Target {
 public:
  virtual ~Target() = default;
  // Thread-safe across workers; `worker` indexes the caller's own connection.
  virtual Reply send(size_t worker, const std::string& body) = 0;
  virtual void prepare(size_t workers) = 0;
};

// In-process: the bundle's Scorer, as `kev score` uses it (errors as the server's statuses).
class BundleTarget : public Target {
 public:
  BundleTarget(const std::string& dir, const ScorerOptions& o) : scorer_(dir, o) {}
  void prepare(size_t) override {}
  Reply send(size_t, const std::string& body) override {
    Reply r;
    const auto start = std::chrono::steady_clock::now();
    try {
      ScoreResult s = scorer_.score(body);
      r.body = s.response.dump();
      r.outcome.status = 200;
      r.outcome.input_tokens = s.usage.input_tokens;
    } catch (const Error& e) {
      if (e.kind() == ErrorKind::kInterrupted) throw;
      r.outcome.status = http_status(e.kind());
      r.body = OrderedJson{{"detail", e.what()}}.dump();
    }
    r.outcome.latency_ms =
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
    return r;
  }
  const Scorer& scorer() const { return scorer_; }

 private:
  Scorer scorer_;
};

struct Url {
  std::string host, port, path;
};

Url parse_url(const std::string& url) {
  const std::string scheme = "http://";
  if (url.rfind("https://", 0) == 0)
    fail(ErrorKind::kUnsupported,
         "--url {}: https is not supported; put a TLS proxy in front or "
         "bench the plain-HTTP address",
         url);
  if (url.rfind(scheme, 0) != 0)
    fail(ErrorKind::kBadInput, "--url {}: must look like http://HOST:PORT[/path], PORT 1..65535",
         url);
  std::string rest = url.substr(scheme.size());
  Url u;
  const size_t slash = rest.find('/');
  u.path = slash == std::string::npos ? "" : rest.substr(slash);
  rest = rest.substr(0, slash);
  const size_t colon = rest.rfind(':');
  u.host = colon == std::string::npos ? rest : rest.substr(0, colon);
  u.port = colon == std::string::npos ? "80" : rest.substr(colon + 1);
  const bool port_ok = !u.port.empty() && u.port.size() <= 5 &&
                       u.port.find_first_not_of("0123456789") == std::string::npos &&
                       std::stoi(u.port) >= 1 && std::stoi(u.port) <= 65535;
  if (u.host.empty() || !port_ok)
    fail(ErrorKind::kBadInput, "--url {}: must look like http://HOST:PORT[/path], PORT 1..65535",
         url);
  if (u.path.empty() || u.path == "/") u.path = "/v1/systemone";
  return u;
}

// Over HTTP/1.1 keep-alive: one connection per worker, reopened after a failure.
class HttpTarget : public Target {
 public:
  HttpTarget(Url url, std::string key, double timeout_s)
      : url_(std::move(url)), key_(std::move(key)), timeout_(timeout_s) {}
  void prepare(size_t workers) override {
    while (conns_.size() < workers) conns_.push_back(std::make_unique<Conn>());
  }
  Reply send(size_t worker, const std::string& body) override {
    return exchange(*conns_.at(worker), http::verb::post, url_.path, body);
  }
  // A GET on the same server (for the metadata); nullopt unless 200 with a JSON body.
  std::optional<nlohmann::json> get_json(const std::string& path) {
    Conn c;
    Reply r = exchange(c, http::verb::get, path, "");
    if (r.outcome.status != 200) return std::nullopt;
    auto j = nlohmann::json::parse(r.body, nullptr, false);
    if (j.is_discarded()) return std::nullopt;
    return j;
  }

 private:
  struct Conn {
    asio::io_context io;
    std::unique_ptr<beast::tcp_stream> stream;
    beast::flat_buffer buffer;
  };

  Reply exchange(Conn& c, http::verb verb, const std::string& path, const std::string& body) {
    Reply r;
    const auto start = std::chrono::steady_clock::now();
    const auto timeout = std::chrono::duration_cast<std::chrono::steady_clock::duration>(
        std::chrono::duration<double>(timeout_));
    for (int attempt = 0; attempt < 2; ++attempt) {
      const bool fresh = !c.stream;
      try {
        if (fresh) {
          asio::ip::tcp::resolver resolver(c.io);
          c.stream = std::make_unique<beast::tcp_stream>(c.io);
          c.stream->expires_after(timeout);
          c.stream->connect(resolver.resolve(url_.host, url_.port));
          c.buffer.clear();
        }
        http::request<http::string_body> req{verb, path, 11};
        req.set(http::field::host, url_.host + ":" + url_.port);
        req.set(http::field::user_agent, std::string("kev-bench/") + KEV_VERSION);
        if (!key_.empty()) req.set(http::field::authorization, "Bearer " + key_);
        if (verb == http::verb::post) {
          req.set(http::field::content_type, "application/json");
          req.body() = body;
        }
        req.keep_alive(true);
        req.prepare_payload();
        c.stream->expires_after(timeout);
        http::write(*c.stream, req);
        http::response_parser<http::string_body> parser;
        parser.body_limit(kMaxAnswerBytes);  // a server's answer cannot grow the client unbounded
        http::read(*c.stream, c.buffer, parser);
        auto res = parser.release();
        r.outcome.status = static_cast<int>(res.result_int());
        r.body = std::move(res.body());
        if (r.outcome.status == 200) r.outcome.input_tokens = input_tokens_of(r.body);
        if (!res.keep_alive()) c.stream.reset();
        break;
      } catch (const std::exception& e) {
        c.stream.reset();
        // A kept-alive connection the server closed meanwhile: one retry on a fresh one.
        if (!fresh && attempt == 0) continue;
        r.outcome.status = 0;
        r.body = OrderedJson{{"detail", fmt::format("no HTTP answer: {}", e.what())}}.dump();
        break;
      }
    }
    r.outcome.latency_ms =
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
    return r;
  }

  Url url_;
  std::string key_;
  double timeout_;
  std::vector<std::unique_ptr<Conn>> conns_;
};

// Sends requests[order[i]] for every i with `concurrency` workers; replies in order's order.
std::vector<Reply> run_pass(Target& target, const std::vector<Request>& requests,
                            const std::vector<size_t>& order, size_t concurrency,
                            const std::string& label, bool progress, double* wall_s) {
  target.prepare(concurrency);
  std::vector<Reply> replies(order.size());
  std::atomic<size_t> next{0}, done{0};
  std::atomic<bool> finished{false};
  std::exception_ptr failure;
  std::mutex failure_mutex;
  const auto start = std::chrono::steady_clock::now();
  std::vector<std::thread> workers;
  for (size_t w = 0; w < std::min(concurrency, order.size()); ++w)
    workers.emplace_back([&, w] {
      try {
        for (size_t i; (i = next.fetch_add(1)) < order.size();) {
          replies[i] = target.send(w, requests[order[i]].body);
          done.fetch_add(1);
        }
      } catch (...) {
        std::lock_guard<std::mutex> lock(failure_mutex);
        if (!failure) failure = std::current_exception();
        next.store(order.size());
      }
    });
  std::thread drawer;
  if (progress)
    drawer = std::thread([&] {
      while (!finished.load()) {
        std::fprintf(stderr, "\r%s: %zu/%zu requests", label.c_str(), done.load(), order.size());
        std::fflush(stderr);
        std::this_thread::sleep_for(std::chrono::milliseconds(200));
      }
      std::fprintf(stderr, "\r%s: %zu/%zu requests\n", label.c_str(), done.load(), order.size());
    });
  for (std::thread& t : workers) t.join();
  *wall_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  finished.store(true);
  if (drawer.joinable()) drawer.join();
  if (failure) std::rethrow_exception(failure);
  return replies;
}

nlohmann::json machine() {
  utsname u{};
  uname(&u);
  char host[256] = {};
  gethostname(host, sizeof host - 1);
  const long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGESIZE);
  std::string model;
  try {
    const std::string cpuinfo = read_file("/proc/cpuinfo");
    const size_t at = cpuinfo.find("model name");
    if (at != std::string::npos) {
      const size_t colon = cpuinfo.find(':', at), end = cpuinfo.find('\n', at);
      if (colon != std::string::npos && colon < end)
        model = cpuinfo.substr(colon + 2, end - colon - 2);
    }
  } catch (const Error&) {
  }
  return {{"hostname", host},
          {"kernel", std::string(u.sysname) + " " + u.release},
          {"arch", u.machine},
          {"cpu_model", model},
          {"cores", std::thread::hardware_concurrency()},
          {"memory_bytes",
           pages > 0 && page > 0 ? static_cast<uint64_t>(pages) * static_cast<uint64_t>(page) : 0}};
}

OrderedJson record(const Request& r, const std::string& phase, const Reply& reply) {
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
  const std::vector<Request> requests = read_requests(o.requests);
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
                         {"machine", machine()}};
  std::unique_ptr<Target> target;
  if (!o.bundle.empty()) {
    auto b = std::make_unique<BundleTarget>(o.bundle, o.scorer);
    meta["target"] = {{"bundle", o.bundle},
                      {"bundle_digest", "sha256:" + sha256_file(o.bundle + "/kev_export.json")},
                      {"precision", precision_name(o.scorer.forward.precision)},
                      {"threads", b->scorer().model().options().threads},
                      {"temperature", b->scorer().head().temperature()}};
    target = std::move(b);
  } else {
    const Url u = parse_url(o.url);
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
  if (!order.empty()) run_pass(*target, requests, order, 1, "warm-up", progress, &wall);

  std::vector<LevelSummary> levels;
  order.clear();
  for (size_t i = 0; i < requests.size(); ++i) order.push_back(i);
  std::vector<Reply> replies =
      run_pass(*target, requests, order, 1, "feasibility", progress, &wall);
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
    replies =
        run_pass(*target, requests, order, c, "concurrency " + std::to_string(c), progress, &wall);
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
