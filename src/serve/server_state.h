// HttpServer::Impl: the state one server's parts share, and where each part lives.
//
//   admission.h / admission.cpp    the queue, its fairness rule, batching policy, deadlines, drain
//   admission_memory.h / .cpp      what a request holds while scored; the memory budget
//   scoring_service.h / .cpp       request bodies to replies, on the workers
//   routes.h / routes.cpp          the route table, one handler per route; CORS preflight, auth
//   http_framing.h / .cpp          RFC 9112 checks on a parsed header (pure functions)
//   connection.h / connection.cpp  one client connection: read, check, route, queue, write
//   log_sink.h / log_sink.cpp      stderr lines written by a thread of their own
//   http_server.cpp                the listener (connection cap, spare descriptor) and lifecycle
//   bundle_info.cpp                what GET /v1/models says of the bundle, from its manifest
//
// Threads: one I/O thread runs every connection and the listener (the fields marked "I/O
// thread only"); max_inflight workers and a sweeper run Admission; the log thread runs LogSink.
// Fields read from several threads are atomics, immutable after start(), or thread-safe types.
// Ownership: shared by HttpServer and every Connection (a connection outlives the server's
// handle while its last completion runs).
#pragma once
#include <algorithm>
#include <array>
#include <atomic>
#include <boost/asio.hpp>
#include <boost/beast/core.hpp>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <unordered_set>

#include "kev/serve/admission.h"
#include "kev/serve/http_server.h"
#include "kev/serve/metrics.h"
#include "kev/serve/openapi.h"
#include "serve/log_sink.h"
#include "serve/reply.h"
#include "serve/routes.h"
#include "serve/scoring_service.h"

namespace kev {

class Connection;

enum class Lifecycle { kLoading, kReady, kDraining };

// Connections answered 503 (at their own pace) beyond max_connections.
inline constexpr size_t kExtraRejecting = 64;

struct HttpServer::Impl : std::enable_shared_from_this<HttpServer::Impl> {
  using Clock = std::chrono::steady_clock;
  using tcp = boost::asio::ip::tcp;

  explicit Impl(ServeOptions o);
  ~Impl();

  ServeOptions options;
  LogSink log;  // every stderr line of the server
  boost::asio::io_context io{1};
  tcp::acceptor acceptor{io};
  std::optional<boost::asio::executor_work_guard<boost::asio::io_context::executor_type>> guard;
  std::thread io_thread;
  Admission<ScoreTask> admission;
  mutable ServeMetrics metrics{route_names()};  // thread-safe (atomic counters)
  ScoringService scoring{options, metrics};     // the scorer, once set_ready() publishes it
  const std::string openapi = openapi_document();
  Clock::time_point started_at = Clock::now();  // start(): model load time is measured from it
  std::atomic<Lifecycle> lifecycle{Lifecycle::kLoading};
  BundleInfo bundle;  // written before the scorer is published, read after it is seen
  const std::string& model = bundle.model;
  std::array<uint8_t, 32> auth_digest{};  // SHA-256 of "Bearer <api_key>"
  bool started = false, waited = false;

  // I/O thread only.
  bool accepting = true;
  std::unordered_set<Connection*> connections;
  size_t rejecting = 0;
  size_t extra_rejecting = std::min(kExtraRejecting, options.max_connections);
  // Held so that a connection can still be taken and answered when the process is out of file
  // descriptors (accept_failed); reopened whenever a connection closes.
  int spare_fd = -1;
  size_t accept_failures = 0;
  Clock::time_point accept_logged{};
  size_t body_bytes = 0;  // reserved by requests being read, queued or scoring
  boost::asio::steady_timer accept_retry{io};

  // The listener (http_server.cpp), on the I/O thread.
  void accept();
  void accept_failed(boost::beast::error_code ec);
  // A new client: admitted, or room made for it, or answered 503 (out_of_fds: it holds the
  // spare descriptor, so room is made even under the connection cap).
  void admit(tcp::socket socket, bool out_of_fds);
  void reopen_spare();
  // A 503 written at once on a socket that does not become a connection.
  void refuse_now(tcp::socket& socket);
  void on_shutdown();
  void connection_closed(Connection* c);
  void maybe_finish() {
    if (!accepting && connections.empty() && rejecting == 0) guard.reset();
  }
};

}  // namespace kev
