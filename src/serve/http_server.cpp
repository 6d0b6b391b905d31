// The listener and lifecycle of HttpServer (kev/serve/http_server.h): binding, accepting under
// the connection cap (with a spare descriptor for when the process is out of them), start,
// readiness, drain, shutdown and wait. The parts are listed in server_state.h.
//
// One I/O thread runs every connection (Asio, non-blocking), so slow or idle clients cost a
// socket and a few KiB, never a thread. Scoring runs on max_inflight worker threads fed by a FIFO
// queue (admission.h); finished work is posted back to the I/O thread, which alone touches
// connection state.
#include "kev/serve/http_server.h"

#include <fcntl.h>
#include <sys/resource.h>
#include <unistd.h>

#include <array>
#include <boost/asio.hpp>
#include <boost/beast/core.hpp>
#include <chrono>
#include <functional>
#include <vector>

#include "kev/core/error.h"
#include "kev/core/sha256.h"
#include "kev/serve/request_id.h"
#include "serve/connection.h"
#include "serve/server_state.h"

namespace kev {
namespace {

namespace asio = boost::asio;
namespace beast = boost::beast;
using tcp = asio::ip::tcp;
using Clock = std::chrono::steady_clock;

// Kernel send buffer per connection (Linux doubles it). Left to autotuning, a client that pipelines
// requests and never reads made the kernel take ~4 MiB of replies per connection: 300 such
// connections, 12 KB of requests, 1.2 GB of kernel memory and a 4 s stall of the I/O thread copying
// them. Replies are small (the largest, /openapi.json, is ~52 KB), so this costs nothing else.
constexpr int kSendBufferBytes = 64 * 1024;

// SHA-256 of "Bearer <api_key>" (zeros when no key is set).
std::array<uint8_t, 32> auth_digest_of(const std::string& api_key) {
  if (api_key.empty()) return {};
  const std::string expected = "Bearer " + api_key;
  Sha256 h;
  h.update(expected.data(), expected.size());
  return h.digest();
}

}  // namespace

HttpServer::Impl::Impl(ServeOptions o)
    : options(std::move(o)),
      auth_digest(auth_digest_of(options.api_key)),
      admission(options.max_inflight, options.max_queue, options.max_batch,
                seconds(options.queue_timeout_s)) {}

void HttpServer::Impl::connection_closed(Connection* c) {
  IoThreadState& st = io_state.get();
  if (c->rejecting()) {
    --st.rejecting;
  } else {
    st.connections.erase(c);
  }
  reopen_spare();  // a descriptor was just freed
  maybe_finish();
}

void HttpServer::Impl::accept() {
  acceptor.async_accept(io, [self = shared_from_this()](beast::error_code ec, tcp::socket socket) {
    if (!self->io_state->accepting) return;
    if (ec) return self->accept_failed(ec);
    self->admit(std::move(socket), false);
    self->accept();
  });
}

void HttpServer::Impl::accept_failed(beast::error_code ec) {
  const bool no_fds =
      ec == asio::error::no_descriptors || ec == boost::system::errc::too_many_files_open_in_system;
  // One line a second at most: a client flood against an exhausted descriptor table must not
  // turn into a flood of log lines.
  IoThreadState& st = io_state.get();
  ++st.accept_failures;
  if (Clock::now() - st.accept_logged >= std::chrono::seconds(1)) {
    st.accept_logged = Clock::now();
    log.line(fmt::format("kev serve: accept failed ({} times): {}; {} connections open",
                         st.accept_failures, ec.message(), st.connections.size()));
    st.accept_failures = 0;
  }
  // Out of descriptors, the client would wait unanswered in the backlog until one is freed (by
  // an idle or request deadline: seconds). The spare descriptor held for this moment is given
  // up to take it: room is made as at the connection cap, else it is answered 503.
  if (no_fds && st.spare_fd >= 0) {
    ::close(st.spare_fd);
    st.spare_fd = -1;
    tcp::socket socket(io);
    beast::error_code aec;
    acceptor.accept(socket, aec);  // non-blocking: would_block if the client has gone
    if (!aec) {
      admit(std::move(socket), true);
      return accept();
    }
    reopen_spare();
  }
  // Retry shortly rather than spin.
  accept_retry.expires_after(std::chrono::milliseconds(100));
  accept_retry.async_wait([self = shared_from_this()](beast::error_code) {
    if (self->io_state->accepting) self->accept();
  });
}

void HttpServer::Impl::refuse_now(tcp::socket& socket) {
  beast::error_code ignored;
  socket.non_blocking(true, ignored);
  // What the client already sent is read and dropped, so that closing does not reset the
  // connection (a reset can discard the reply before the client reads it).
  std::array<char, 4096> sink;
  for (int i = 0; i < 16 && socket.read_some(asio::buffer(sink), ignored) > 0;) ++i;
  const std::string body = R"({"detail":"too many connections; retry later"})";
  const std::string reply = fmt::format(
      "HTTP/1.1 503 Service Unavailable\r\nContent-Type: application/json\r\nRetry-After: "
      "1\r\n{}: {}\r\nserver-timing: app;dur=0.0\r\nConnection: close\r\nContent-Length: "
      "{}\r\n\r\n{}",
      kRequestIdHeader, new_request_id(), body.size(), body);
  socket.write_some(asio::buffer(reply), ignored);  // a few hundred bytes: fits any send buffer
  metrics.request(metrics.other(), 503, 0);
  socket.shutdown(tcp::socket::shutdown_send, ignored);
  socket.close(ignored);
}

void HttpServer::Impl::reopen_spare() {
  IoThreadState& st = io_state.get();
  if (st.spare_fd < 0) st.spare_fd = ::open("/dev/null", O_RDONLY | O_CLOEXEC);
}

void HttpServer::Impl::admit(tcp::socket socket, bool out_of_fds) {
  beast::error_code ignored;
  socket.set_option(tcp::no_delay(true), ignored);
  socket.set_option(asio::socket_base::send_buffer_size(kSendBufferBytes), ignored);
  IoThreadState& st = io_state.get();
  bool reject = false;
  if (st.connections.size() >= options.max_connections || out_of_fds) {
    // Make room by closing an idle keep-alive connection (its client reconnects at no
    // cost), else the one that has been sending its request the longest: at the cap that is
    // a slow-header/slow-body client, while a normal request is read in milliseconds. When
    // there is neither, the new connection is refused (503).
    Connection* victim = nullptr;
    for (Connection* c : st.connections)
      if (c->idle_between_requests()) {
        victim = c;
        break;
      }
    // A reader is only a victim after a grace time, so a normal request caught mid-read
    // at the cap is not cut off by a newcomer.
    const auto grace =
        Clock::now() - std::min(seconds(1.0), seconds(options.request_timeout_s / 2));
    if (!victim)
      for (Connection* c : st.connections)
        if (c->reading() && c->started() < grace && (!victim || c->started() < victim->started()))
          victim = c;
    if (victim) {
      victim->evict();
    } else {
      reject = true;
    }
  }
  // Beyond the connections answered 503 at their own pace, or holding the spare descriptor:
  // answered at once instead, so that the descriptor is free again before the next accept.
  if (reject && (out_of_fds || st.rejecting >= extra_rejecting)) {
    refuse_now(socket);
    reopen_spare();
    return;
  }
  auto c = std::make_shared<Connection>(shared_from_this(), std::move(socket), reject);
  if (reject) {
    ++st.rejecting;
  } else {
    st.connections.insert(c.get());
  }
  c->start();
}

void HttpServer::Impl::on_shutdown() {
  IoThreadState& st = io_state.get();
  if (!st.accepting) return;
  st.accepting = false;
  beast::error_code ignored;
  acceptor.close(ignored);
  accept_retry.cancel();
  std::vector<Connection*> idle;
  for (Connection* c : st.connections)
    if (c->idle()) idle.push_back(c);
  for (Connection* c : idle) c->close();
  maybe_finish();
}

HttpServer::HttpServer(ServeOptions options) : impl_(std::make_shared<Impl>(std::move(options))) {
  const ServeOptions& o = impl_->options;
  if (o.max_inflight == 0 || o.max_inflight > 1024)
    fail(ErrorKind::kBadInput, "--max-inflight must be between 1 and 1024");
  if (o.max_batch == 0 || o.max_batch > 1024)
    fail(ErrorKind::kBadInput, "--max-batch must be between 1 and 1024");
  if (o.max_connections == 0 || o.max_connections > 1000000)
    fail(ErrorKind::kBadInput, "--max-connections must be between 1 and 1000000");
  if (o.max_queue > 1000000) fail(ErrorKind::kBadInput, "--max-queue must be at most 1000000");
  if (o.max_body_total < o.max_body)
    fail(ErrorKind::kBadInput, "--max-body-total ({}) must be at least --max-body ({})",
         o.max_body_total, o.max_body);
  if (o.max_header_bytes < 256 || o.max_header_bytes > (size_t{1} << 30))
    fail(ErrorKind::kBadInput, "--max-header-bytes must be between 256 and 2^30");
  for (double t : {o.queue_timeout_s, o.request_timeout_s, o.idle_timeout_s})
    if (!(t > 0 && t <= 86400))
      fail(ErrorKind::kBadInput, "timeouts must be between 0 and 86400 seconds, not {}", t);
}

HttpServer::~HttpServer() {
  try {
    shutdown();
    wait();
  } catch (...) {  // a destructor does not throw; wait() only joins threads
  }
  impl_->log.stop();  // what is queued, for at most a second if stderr is not read
}

int HttpServer::bind() {
  const ServeOptions& o = impl_->options;
  if (o.port < 0 || o.port > 65535)
    fail(ErrorKind::kBadInput, "--port {} is not a TCP port (0..65535)", o.port);
  // Each connection is a file descriptor; raise the soft limit as far as allowed.
  rlimit rl{};
  if (getrlimit(RLIMIT_NOFILE, &rl) == 0) {
    // Connections, those answered 503 beyond the cap, and the process's own few (standard
    // streams, the event loop's, the listener, the spare: 8 measured, 16 allowed).
    const rlim_t need = o.max_connections + impl_->extra_rejecting + 16;
    if (rl.rlim_cur < need) {
      rl.rlim_cur = std::min<rlim_t>(need, rl.rlim_max);
      setrlimit(RLIMIT_NOFILE, &rl);
    }
    if (rl.rlim_cur < need)
      fail(ErrorKind::kBadInput,
           "--max-connections {} needs {} file descriptors but the limit is {}: raise ulimit -n "
           "or lower --max-connections",
           o.max_connections, need, rl.rlim_cur);
  }
  beast::error_code ec;
  auto address = asio::ip::make_address(o.host, ec);
  if (ec) fail(ErrorKind::kIo, "cannot listen on {}:{} (not an IP address)", o.host, o.port);
  tcp::endpoint endpoint(address, static_cast<unsigned short>(o.port));
  tcp::acceptor& a = impl_->acceptor;
  a.open(endpoint.protocol(), ec);
  // SO_REUSEADDR for quick restarts; never SO_REUSEPORT, which would let a second server bind
  // the same port silently and split the traffic.
  if (!ec) a.set_option(asio::socket_base::reuse_address(true), ec);
  if (!ec) a.bind(endpoint, ec);
  // A deep backlog: bursts of new connections wait in the kernel queue, not on SYN retries.
  if (!ec) a.listen(asio::socket_base::max_listen_connections, ec);
  if (ec) fail(ErrorKind::kIo, "cannot listen on {}:{} ({})", o.host, o.port, ec.message());
  return a.local_endpoint().port();
}

void HttpServer::start() {
  Impl& s = *impl_;
  if (s.started) return;
  s.started = true;
  s.started_at = Clock::now();
  s.guard.emplace(s.io.get_executor());
  s.admission.start(
      [&s](const std::vector<std::shared_ptr<ScoreTask>>& tasks) { return s.scoring.run(tasks); },
      [&s](std::string line) { s.log.line(std::move(line)); });
  beast::error_code ignored;
  s.acceptor.non_blocking(true, ignored);  // for accept_failed()'s one synchronous accept
  // The listener is the I/O thread's from here: its first handler opens the spare descriptor
  // and starts accepting (clients that connect before it wait in the listen backlog).
  asio::post(s.io, [&s] {
    s.reopen_spare();
    s.accept();
  });
  s.io_thread = std::thread([&s] {
    // A handler that throws (e.g. bad_alloc) costs its connection, not the process: log it and
    // keep running the loop (Asio allows run() again after an exception).
    for (;;) {
      try {
        s.io.run();
        return;
      } catch (const std::exception& e) {
        s.log.line(fmt::format("kev serve: internal error in the I/O loop: {}", e.what()));
      }
    }
  });
}

void HttpServer::set_ready(const Scorer& scorer, BundleInfo bundle) {
  impl_->metrics.model_loaded(
      std::chrono::duration<double>(Clock::now() - impl_->started_at).count());
  impl_->bundle = std::move(bundle);
  impl_->scoring.publish(scorer);
  Lifecycle expected = Lifecycle::kLoading;
  impl_->lifecycle.compare_exchange_strong(expected, Lifecycle::kReady);
}

void HttpServer::drain() {
  impl_->lifecycle.store(Lifecycle::kDraining);
}

void HttpServer::stop_work() {
  impl_->scoring.stopping.store(true);
}

void HttpServer::log_line(std::string line) {
  impl_->log.line(std::move(line));
}

void HttpServer::shutdown() {
  drain();
  if (!impl_->started) return;
  asio::post(impl_->io, [s = impl_] { s->on_shutdown(); });
}

void HttpServer::wait() {
  Impl& s = *impl_;
  if (!s.started || s.waited) return;
  s.waited = true;
  s.io_thread.join();
  s.admission.stop();  // every job was answered: connections wait for theirs before closing
}

}  // namespace kev
