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
// (What GET /v1/models says of the bundle comes from kev/score/bundle.h's BundleInfo.)
//
// Threads: one I/O thread runs every connection and the listener; max_inflight workers and a
// sweeper run Admission; the log thread runs LogSink. The state is split by who may touch it:
// configuration (const), thread-safe parts (atomics and types that lock for themselves), and the
// I/O thread's own state (IoThreadState), reached only through io_state, which refuses any other
// thread.
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
#include <stdexcept>
#include <string>
#include <thread>
#include <unordered_set>

#include <unistd.h>

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

// A value only the I/O thread may touch: get() checks that the calling thread is running `io`
// and throws std::logic_error otherwise, so a stray access from another thread fails loudly in
// every build (that thread's guard logs it) instead of racing. Destroyed with the server, on any
// thread.
template <class T>
class IoThreadOnly {
 public:
  explicit IoThreadOnly(boost::asio::io_context& io) : io_(io) {}
  T& get() {
    check();
    return value_;
  }
  const T& get() const {
    check();
    return value_;
  }
  T* operator->() { return &get(); }
  const T* operator->() const { return &get(); }

 private:
  void check() const {
    if (!io_.get_executor().running_in_this_thread())
      throw std::logic_error("kev serve: the I/O thread's state was reached from another thread");
  }

  boost::asio::io_context& io_;
  T value_;
};

// The I/O thread's own state.
struct IoThreadState {
  IoThreadState() = default;
  IoThreadState(const IoThreadState&) = delete;
  IoThreadState& operator=(const IoThreadState&) = delete;
  ~IoThreadState() {
    if (spare_fd >= 0) ::close(spare_fd);
  }

  bool accepting = true;  // false once shutdown began
  std::unordered_set<Connection*> connections;
  size_t rejecting = 0;  // connections being answered 503 beyond the cap
  // Held so that a connection can still be taken and answered when the process is out of file
  // descriptors (accept_failed); reopened whenever a connection closes.
  int spare_fd = -1;
  size_t accept_failures = 0;
  std::chrono::steady_clock::time_point accept_logged{};
  size_t body_bytes = 0;  // reserved by requests being read, queued or scoring
};

struct HttpServer::Impl : std::enable_shared_from_this<HttpServer::Impl> {
  using Clock = std::chrono::steady_clock;
  using tcp = boost::asio::ip::tcp;

  explicit Impl(ServeOptions o);

  // Configuration: fixed at construction.
  const ServeOptions options;
  const size_t extra_rejecting = std::min(kExtraRejecting, options.max_connections);
  const std::array<uint8_t, 32> auth_digest;  // SHA-256 of "Bearer <api_key>"
  const std::string openapi = openapi_document();

  // Thread-safe.
  LogSink log;  // every stderr line of the server
  boost::asio::io_context io{1};
  Admission<ScoreTask> admission;
  mutable ServeMetrics metrics{route_names()};  // atomic counters
  ScoringService scoring{options, metrics};     // the scorer, once set_ready() publishes it
  std::atomic<Lifecycle> lifecycle{Lifecycle::kLoading};

  // Written before the scorer is published (set_ready), read after it is seen.
  Clock::time_point started_at = Clock::now();  // start(): model load time is measured from it
  BundleInfo bundle;
  const std::string& model = bundle.model;

  // The caller's thread (bind(), start(), wait()); the listener and the guard are the I/O
  // thread's once it runs.
  bool started = false, waited = false;
  std::thread io_thread;
  tcp::acceptor acceptor{io};
  std::optional<boost::asio::executor_work_guard<boost::asio::io_context::executor_type>> guard;

  // The I/O thread's.
  IoThreadOnly<IoThreadState> io_state{io};
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
    IoThreadState& st = io_state.get();
    if (!st.accepting && st.connections.empty() && st.rejecting == 0) guard.reset();
  }
};

}  // namespace kev
