// `kev serve`: the HTTP API (POST /v1/systemone[/permute|/separate], GET /health[/live|/ready],
// GET /v1/models, GET /metrics, GET /openapi.json; docs/api.md) over a bundle. Listens first, then
// loads the bundle (a balancer sees "loading"), then prints one JSON line {"listening":
// "http://HOST:PORT", "model": NAME} on stdout. SIGINT/SIGTERM: not ready at once, keep serving
// for --drain-delay seconds, then stop accepting, answer every accepted request and exit 0;
// further signals change nothing.
#include <chrono>
#include <csignal>
#include <cstdio>
#include <optional>
#include <thread>

#include "cli/command.h"
#include "cli/scorer_flags.h"
#include "kev/core/error.h"
#include "kev/core/interrupt.h"
#include "kev/serve/http_server.h"

namespace kev::cli {
namespace {

struct ServeCliOptions {
  std::string bundle;
  ServeOptions serve;
  ScorerOptions scorer;
  double drain_delay_s = 0;
  std::string log_format = "text";
  bool quiet = false;
};

void sleep_ms(int ms) {
  std::this_thread::sleep_for(std::chrono::milliseconds(ms));
}

int run_serve(ServeCliOptions& o) {
  if (!(o.drain_delay_s >= 0 && o.drain_delay_s <= 3600))
    fail(ErrorKind::kBadInput, "--drain-delay must be between 0 and 3600 seconds");
  o.serve.log_requests = !o.quiet;
  o.serve.log_format = o.log_format == "json" ? LogFormat::kJson : LogFormat::kText;
  std::optional<Scorer> scorer;  // outlives the server, which answers from it until wait()
  // The request log goes to stderr: if that is a pipe whose reader has gone, a write must fail
  // (EPIPE), not kill the server mid-request. Sockets already write with MSG_NOSIGNAL.
  std::signal(SIGPIPE, SIG_IGN);
  HttpServer server(o.serve);
  const int port = server.bind();
  server.start();  // /health/live answers, /health/ready and /v1/* say "loading"
  BundleInfo bundle = read_bundle_info(o.bundle);
  const std::string model = bundle.model;
  scorer.emplace(o.bundle, o.scorer);
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
  if (!o.quiet) std::fprintf(stderr, "kev serve: draining\n");
  const auto until = std::chrono::steady_clock::now() +
                     std::chrono::duration_cast<std::chrono::steady_clock::duration>(
                         std::chrono::duration<double>(o.drain_delay_s));
  while (std::chrono::steady_clock::now() < until) sleep_ms(20);
  server.shutdown();
  server.wait();
  if (!o.quiet) std::fprintf(stderr, "kev serve: stopped\n");
  return 0;
}

const bool registered = register_command(
    "serve",
    "serve the System1-Omni HTTP API (/v1/systemone, /health, /v1/models; docs/api.md) from "
    "a bundle",
    [](CLI::App& app) {
      auto o = std::make_shared<ServeCliOptions>();
      app.add_option("--bundle", o->bundle, "export bundle directory")->required();
      app.add_option("--host", o->serve.host, "address to listen on (default 127.0.0.1)");
      app.add_option("--port", o->serve.port, "TCP port (default 8000; 0 picks a free port)");
      app.add_option("--max-inflight", o->serve.max_inflight,
                     "requests scoring at once (default 1: one request already uses all cores)")
          ->check(CLI::PositiveNumber);
      app.add_option("--max-queue", o->serve.max_queue,
                     "requests waiting for a scoring slot before 503 (default 16)");
      app.add_option("--max-body", o->serve.max_body,
                     "largest request body in bytes, else 413 (default 4 MiB)")
          ->check(CLI::PositiveNumber);
      app.add_option("--max-body-total", o->serve.max_body_total,
                     "request bodies held in memory at once (being read, queued or scoring), "
                     "else 503 (default 256 MiB)");
      app.add_option("--queue-timeout", o->serve.queue_timeout_s,
                     "longest wait in seconds for a scoring slot, then 503 (default 30)");
      app.add_option("--max-connections", o->serve.max_connections,
                     "open connections; beyond, an idle one is closed or the new one gets 503 "
                     "(default 1024)")
          ->check(CLI::PositiveNumber);
      app.add_option("--max-header-bytes", o->serve.max_header_bytes,
                     "largest request header section, else 431 (default 16384)");
      app.add_option("--max-headers", o->serve.max_headers,
                     "most header fields in a request, else 431 (default 100)");
      app.add_option("--request-timeout", o->serve.request_timeout_s,
                     "seconds to receive a whole request (headers and body) or send a response "
                     "(default 10)");
      app.add_option("--idle-timeout", o->serve.idle_timeout_s,
                     "seconds a keep-alive connection may wait for its next request (default 5)");
      app.add_option("--max-json-keys", o->serve.json.max_object_keys,
                     "most keys in any one JSON object of a request, else 422 (default 16384)");
      app.add_option("--max-json-elements", o->serve.json.max_array_elements,
                     "most elements in any one JSON array of a request, else 422 (default 16384)");
      app.add_option(
             "--log-format", o->log_format,
             "request log on stderr: text (one \"kev serve: METHOD PATH STATUS N ms\" line, "
             "the default) or json (one JSON object a line with request id, tokens, queue "
             "wait; docs/serving.md)")
          ->check(CLI::IsMember({"text", "json"}));
      app.add_option("--drain-delay", o->drain_delay_s,
                     "after SIGTERM, seconds to keep serving while not ready (default 0)");
      add_scorer_flags(app, o->scorer);
      // main() adds --quiet to the command and to `kev` itself; either silences the log.
      CLI::Option* quiet_here = app.get_option_no_throw("--quiet");
      CLI::Option* quiet_top =
          app.get_parent() ? app.get_parent()->get_option_no_throw("--quiet") : nullptr;
      return [o, quiet_here, quiet_top] {
        o->quiet = (quiet_here && quiet_here->count() > 0) || (quiet_top && quiet_top->count() > 0);
        return run_serve(*o);
      };
    });

}  // namespace
}  // namespace kev::cli
