// `kev serve`: the HTTP API (POST /v1/systemone, GET /health, GET /v1/models) over a bundle.
// Binds first and answers /health/live and /health/ready ("loading") while the bundle loads;
// prints one JSON line {"listening": "http://HOST:PORT", "model": NAME} on stdout once loaded.
// SIGINT/SIGTERM: not ready at once ("draining"), keep serving for --drain-delay seconds, then
// stop accepting, let every accepted request finish, exit 0.
#include <atomic>
#include <chrono>
#include <cstdio>
#include <memory>
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
  bool quiet = false;
  double drain_delay_s = 0;
};

// Stops `server` and waits for run() to return. stop() is repeated because one that lands
// before the accept loop has started is a no-op.
void stop_and_join(HttpServer& server, std::thread& runner, const std::atomic<bool>& returned) {
  while (!returned.load()) {
    server.stop();
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  runner.join();
}

int run_serve(ServeCliOptions& o) {
  const std::string model = bundle_model_name(o.bundle);
  o.serve.log_requests = !o.quiet;
  // Bind and answer /health/* first, so a balancer sees "loading" rather than a refused port.
  std::unique_ptr<Scorer> scorer;  // declared first: outlives the server
  HttpServer server(model, o.serve);
  const int port = server.bind();
  std::atomic<bool> returned{false};
  std::thread runner([&] {
    server.run();
    returned = true;
  });
  try {
    scorer = std::make_unique<Scorer>(o.bundle, o.scorer);
    check_interrupted();  // a signal during loading: stop before turning ready
  } catch (...) {
    stop_and_join(server, runner, returned);
    throw;
  }
  server.set_scorer(*scorer);

  const std::string& host = o.serve.host;
  const std::string shown = host.find(':') != std::string::npos ? "[" + host + "]" : host;
  std::printf("%s\n",
              OrderedJson{{"listening", fmt::format("http://{}:{}", shown, port)}, {"model", model}}
                  .dump()
                  .c_str());
  std::fflush(stdout);

  // The signal handler only sets a flag; this (main) thread polls it: drain() at once, then
  // after --drain-delay stop() (run() returns once every accepted request is answered).
  using Clock = std::chrono::steady_clock;
  std::optional<Clock::time_point> drain_since;
  while (!returned.load()) {
    if (interrupted() && !drain_since) {
      server.drain();
      drain_since = Clock::now();
    }
    if (drain_since &&
        Clock::now() - *drain_since >= std::chrono::duration<double>(o.drain_delay_s))
      break;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  stop_and_join(server, runner, returned);
  if (!o.quiet) std::fprintf(stderr, "kev serve: stopped\n");
  return 0;
}

const bool registered = register_command(
    "serve", "serve the System1-Omni HTTP API (/v1/systemone, /health, /v1/models) from a bundle",
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
      app.add_option("--drain-delay", o->drain_delay_s,
                     "seconds to keep serving, not ready, after SIGTERM/SIGINT before refusing "
                     "new connections (default 0)")
          ->check(CLI::NonNegativeNumber);
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
