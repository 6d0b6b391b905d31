// `kev serve`: the HTTP API (POST /v1/systemone[/permute|/separate], GET /health[/live|/ready],
// GET /v1/models, GET /metrics, GET /openapi.json; docs/api.md) over a bundle. Listens first, then
// loads the bundle (a balancer sees "loading"), then prints one JSON line {"listening":
// "http://HOST:PORT", "model": NAME} on stdout. SIGINT/SIGTERM: not ready at once, keep serving
// for --drain-delay seconds, then stop accepting, answer every accepted request and exit 0; work
// still unanswered --drain-timeout seconds later stops at its next safe point and is answered
// 503. Further signals change nothing. With --state-dir, the saved points still queued are then
// written for at most --state-drain-timeout seconds.
#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <charconv>
#include <chrono>
#include <condition_variable>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <optional>
#include <thread>

#include "cli/command.h"
#include "cli/options.h"
#include "cli/scorer_flags.h"
#include "cli/upstream_env.h"
#include "kev/core/error.h"
#include "kev/core/file.h"
#include "kev/core/interrupt.h"
#include "kev/serve/http_server.h"

namespace kev::cli {
namespace {

struct ServeCliOptions {
  std::string bundle;
  ServeOptions serve;
  ScorerOptions scorer;
  double drain_delay_s = 0;
  double drain_timeout_s = 30;
  std::string log_format = "text";
  bool quiet = false;
  std::string api_key_file;
};

// The bearer key, from --api-key-file, KEV_API_KEY_FILE or KEV_API_KEY (in that order); "" =
// open server. A file may end with one newline. Never printed.
std::string api_key(const std::string& flag_file) {
  auto env_key = env("KEV_API_KEY");
  auto env_file = env("KEV_API_KEY_FILE");
  std::string key, from;
  if (!flag_file.empty() || env_file) {
    if (flag_file.empty() && env_key)
      fail(ErrorKind::kBadInput, "set only one of KEV_API_KEY and KEV_API_KEY_FILE");
    from = flag_file.empty() ? *env_file : flag_file;
    key = read_file(from);
    if (key.ends_with("\r\n")) {
      key.resize(key.size() - 2);
    } else if (key.ends_with("\n")) {
      key.pop_back();
    }
    from = "the API key file " + from;
  } else if (env_key) {
    key = *env_key;
    from = "KEV_API_KEY";
  } else {
    return "";
  }
  bool visible = !key.empty() && key.size() <= 4096;
  for (unsigned char c : key) visible = visible && c > 0x20 && c < 0x7f;
  if (!visible)
    fail(ErrorKind::kBadInput,
         "{} must hold one key of 1 to 4096 visible ASCII characters (no spaces)", from);
  return key;
}

void sleep_ms(int ms) {
  std::this_thread::sleep_for(std::chrono::milliseconds(ms));
}

// Started with stdin, stdout or stderr closed (`2>&-`), the first descriptors the server opens
// would take those numbers: log lines would be written into the event loop's eventfd or a
// client's socket. Each closed one is opened on /dev/null first.
void open_standard_descriptors() {
  for (int fd = 0; fd <= 2; ++fd) {
    if (::fcntl(fd, F_GETFD) != -1 || errno != EBADF) continue;
    const int null = ::open("/dev/null", fd == 0 ? O_RDONLY : O_WRONLY);
    if (null >= 0 && null != fd) {  // lower numbers are open, so this is fd unless one failed
      ::dup2(null, fd);
      ::close(null);
    }
  }
}

int run_serve(ServeCliOptions& o) {
  open_standard_descriptors();
  if (!(o.drain_delay_s >= 0 && o.drain_delay_s <= 3600))
    fail(ErrorKind::kBadInput, "--drain-delay must be between 0 and 3600 seconds");
  if (!(o.drain_timeout_s >= 0 && o.drain_timeout_s <= 86400))
    fail(ErrorKind::kBadInput, "--drain-timeout must be between 0 and 86400 seconds");
  o.serve.log_requests = !o.quiet;
  o.serve.log_format = o.log_format == "json" ? LogFormat::kJson : LogFormat::kText;
  std::optional<Scorer> scorer;  // outlives the server, which answers from it until wait()
  // The request log goes to stderr: if that is a pipe whose reader has gone, a write must fail
  // (EPIPE), not kill the server mid-request. Sockets already write with MSG_NOSIGNAL.
  std::signal(SIGPIPE, SIG_IGN);
  HttpServer server(o.serve);
  const int port = server.bind();
  server.start();  // /health/live answers, /health/ready and /v1/* say "loading"
  const Bundle opened = open_bundle(o.bundle);
  BundleInfo bundle = opened.info();
  const std::string model = bundle.model;
  o.scorer.state_log = [&server](const std::string& line) { server.log_line(line); };
  scorer.emplace(opened, o.scorer);
  check_interrupted();  // a signal during loading: nothing was accepted for scoring yet

  server.set_ready(*scorer, std::move(bundle));
  const std::string& host = o.serve.host;
  const std::string shown = host.find(':') != std::string::npos ? "[" + host + "]" : host;
  std::printf("%s\n",
              OrderedJson{{"listening", fmt::format("http://{}:{}", shown, port)}, {"model", model}}
                  .dump()
                  .c_str());
  std::fflush(stdout);

  // The signal handler only sets a flag; this thread turns it into the drain sequence.
  while (!interrupted()) sleep_ms(50);
  server.drain();
  if (!o.quiet) server.log_line("kev serve: draining");
  const auto until = std::chrono::steady_clock::now() +
                     std::chrono::duration_cast<std::chrono::steady_clock::duration>(
                         std::chrono::duration<double>(o.drain_delay_s));
  while (std::chrono::steady_clock::now() < until) sleep_ms(20);
  server.shutdown();
  // The drain's deadline: work still unanswered then stops at its next safe point (503).
  std::mutex m;
  std::condition_variable cv;
  bool waited = false;
  std::thread deadline([&] {
    std::unique_lock lock(m);
    if (cv.wait_for(lock, std::chrono::duration<double>(o.drain_timeout_s), [&] { return waited; }))
      return;
    server.stop_work();
    if (!o.quiet) server.log_line("kev serve: drain deadline passed; stopping the work in flight");
  });
  server.wait();
  {
    std::lock_guard lock(m);
    waited = true;
  }
  cv.notify_one();
  deadline.join();
  if (StateStore* store = scorer->state_store()) {
    const auto start = std::chrono::steady_clock::now();
    const size_t queued = store->counts().pending;
    const size_t left = store->flush(o.scorer.state_drain_seconds);
    if (!o.quiet)
      server.log_line(fmt::format(
          "kev serve: wrote {} of {} queued saved points to --state-dir in {:.2f} s", queued - left,
          queued, std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count()));
  }
  if (!o.quiet) server.log_line("kev serve: stopped");
  return 0;
}

const bool serve_registered = register_command(
    "serve",
    "serve the System1-Omni HTTP API (/v1/systemone, /health, /v1/models; docs/api.md) from "
    "a bundle",
    [](CLI::App& app) {
      auto o = std::make_shared<ServeCliOptions>();
      app.add_option("--bundle", o->bundle, "export bundle directory")->check(path())->required();
      app.add_option("--host", o->serve.host, "address to listen on (default 127.0.0.1)")
          ->check(text());
      app.add_option("--port", o->serve.port, "TCP port (default 8000; 0 picks a free port)")
          ->check(whole(0, 65535));
      app.add_option("--max-inflight", o->serve.max_inflight,
                     "requests scoring at once (default 1: one request already uses all cores)")
          ->check(whole(1, 256));
      app.add_option("--max-batch", o->serve.max_batch,
                     "requests a free worker takes from the queue and scores in one model pass, "
                     "their question rows batched together (default 8; 1: one request at a time)")
          ->check(whole(1, 1024));
      app.add_option("--max-queue", o->serve.max_queue,
                     "requests waiting for a scoring slot before 503 (default 16)")
          ->check(whole(0, 65536));
      app.add_option("--max-body", o->serve.max_body,
                     "largest request body in bytes, else 413 (default 4 MiB)")
          ->check(whole(1, uint64_t{1} << 30));
      app.add_option("--max-body-total", o->serve.max_body_total,
                     "request bodies held in memory at once (being read, queued or scoring), "
                     "else 503 (default 256 MiB)")
          ->check(whole(1, uint64_t{1} << 40));
      app.add_option("--memory-budget", o->serve.memory_budget,
                     "bytes the requests being scored may hold together (keys/values, states, "
                     "scratch); a batch waits for room, a request that alone needs more is 413 "
                     "(default 0: half the machine's memory less --cache-bytes)")
          ->check(whole(0, uint64_t{1} << 50));
      app.add_option("--queue-timeout", o->serve.queue_timeout_s,
                     "longest wait in seconds for a scoring slot, then 503 (default 30)")
          ->check(number(0, Bound::kOpen, 86400, Bound::kClosed));
      app.add_option("--max-connections", o->serve.max_connections,
                     "open connections; beyond, an idle one is closed or the new one gets 503 "
                     "(default 1024)")
          ->check(whole(1, 1 << 20));
      app.add_option("--max-header-bytes", o->serve.max_header_bytes,
                     "largest request header section, else 431 (default 16384)")
          ->check(whole(1, 1 << 20));
      app.add_option("--max-headers", o->serve.max_headers,
                     "most header fields in a request, else 431 (default 100)")
          ->check(whole(1, 10000));
      app.add_option("--request-timeout", o->serve.request_timeout_s,
                     "seconds to receive a whole request (headers and body) or send a response "
                     "(default 10)")
          ->check(number(0, Bound::kOpen, 86400, Bound::kClosed));
      app.add_option("--idle-timeout", o->serve.idle_timeout_s,
                     "seconds a keep-alive connection may wait for its next request (default 5)")
          ->check(number(0, Bound::kOpen, 86400, Bound::kClosed));
      add_json_limit_flags(app, o->serve.json);
      app.add_option(
             "--log-format", o->log_format,
             "request log on stderr: text (one \"kev serve: METHOD PATH STATUS N ms\" line, "
             "the default) or json (one JSON object a line with request id, tokens, queue "
             "wait; docs/serving.md)")
          ->check(one_of({"text", "json"}));
      app.add_option("--drain-delay", o->drain_delay_s,
                     "after SIGTERM, seconds to keep serving while not ready (default 0)")
          ->check(number(0, Bound::kClosed, 3600, Bound::kClosed));
      app.add_option("--drain-timeout", o->drain_timeout_s,
                     "after the drain delay, seconds to finish the work accepted; then what is "
                     "left stops at its next safe point and is answered 503 (default 30)")
          ->check(number(0, Bound::kClosed, 86400, Bound::kClosed));
      app.add_option("--api-key-file", o->api_key_file,
                     "require \"Authorization: Bearer <key>\" on /v1 paths, the key read from "
                     "this file (else KEV_API_KEY_FILE, else KEV_API_KEY; none: open server)")
          ->check(path());
      CLI::Option* date_facts =
          app.add_flag("--date-facts", o->serve.date_facts,
                       "add day counts between the state's absolute dates before scoring "
                       "(upstream; also KEV_DATE_FACTS=1)");
      add_scorer_flags(app, o->scorer);
      const EnvFlags flags = env_flags(app, date_facts);
      CLI::Option* temperature = app.get_option_no_throw("--temperature");
      // main() adds --quiet to the command and to `kev` itself; either silences the log.
      CLI::Option* quiet_here = app.get_option_no_throw("--quiet");
      CLI::Option* quiet_top =
          app.get_parent() ? app.get_parent()->get_option_no_throw("--quiet") : nullptr;
      return [=] {
        o->quiet = (quiet_here && quiet_here->count() > 0) || (quiet_top && quiet_top->count() > 0);
        // Upstream's environment; the flags above win.
        o->serve.api_key = api_key(o->api_key_file);
        apply_upstream_env(flags, o->scorer, o->serve.date_facts);
        apply_temperature_env(temperature, o->scorer.temperature);
        return run_serve(*o);
      };
    });

}  // namespace
}  // namespace kev::cli
