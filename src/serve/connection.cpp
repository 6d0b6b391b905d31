// Connection (connection.h): one client's state machine on the I/O thread.
#include "serve/connection.h"

#include <fmt/format.h>
#include <linux/sockios.h>
#include <poll.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <boost/asio.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <chrono>
#include <ctime>
#include <functional>
#include <limits>
#include <optional>
#include <string>

#include "kev/core/utc_time.h"
#include "kev/serve/http_framing.h"
#include "kev/serve/request_id.h"
#include "kev/text/python_compat.h"
#include "serve/server_state.h"

namespace kev {
namespace {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using tcp = asio::ip::tcp;
using Clock = std::chrono::steady_clock;

constexpr size_t kLingerBytes = 1 << 20;  // discarded after an error reply before closing
constexpr auto kLingerTime = std::chrono::seconds(2);
constexpr auto kEvictIdleAfter = std::chrono::milliseconds(100);  // see idle_between_requests()

}  // namespace

Connection::Connection(std::shared_ptr<HttpServer::Impl> server, tcp::socket socket, bool reject)
    : srv_(std::move(server)),
      stream_(std::move(socket)),
      buffer_(srv_->options.max_header_bytes + 65536),
      reject_(reject),
      route_(srv_->metrics.other()) {}

void Connection::start() {
  if (reject_) {
    // Over the connection limit and nothing idle to close: say so instead of leaving the
    // client in the backlog.
    return send(detail(503, "too many connections; retry later", true));
  }
  wait_request();
}

// Waiting for a next request with nothing of it received: no bytes in our buffer or in the
// kernel's, so closing it cannot drop a request the client has already sent.
bool Connection::idle() {
  beast::error_code ec;
  return phase_ == Phase::kIdle && buffer_.size() == 0 && stream_.socket().available(ec) == 0 &&
         !ec;
}

// Idle after serving at least one request: a keep-alive connection whose client can reconnect
// at no cost (a brand-new connection is not idle in this sense; newcomers must not evict each
// other at the connection cap).
// Only after kEvictIdleAfter: a client usually sends its next request within milliseconds of
// an answer, and a connection closed just as that request is on its way fails it with no
// answer (the client cannot tell it was not processed).
bool Connection::idle_between_requests() {
  return served_ > 0 && Clock::now() - idle_since_ >= kEvictIdleAfter && idle();
}

bool Connection::reading() const {
  return phase_ == Phase::kReading;
}

Clock::time_point Connection::started() const {
  return start_;
}

void Connection::evict() {
  if (reading()) log(408);
  close();
}

const ServeOptions& Connection::opt() const {
  return srv_->options;
}

// Keep-alive: wait (idle_timeout) for the first byte of the next request, unless a pipelined
// one is already buffered.
void Connection::wait_request() {
  phase_ = Phase::kIdle;
  idle_since_ = Clock::now();
  if (buffer_.size() > 0) return begin_request();
  if (!srv_->io_state->accepting) {  // draining: only a request the client has already sent is read
    beast::error_code ec;
    if (stream_.socket().available(ec) == 0 || ec) return close();
  }
  stream_.expires_after(seconds(opt().idle_timeout_s));
  stream_.async_read_some(buffer_.prepare(4096),
                          [self = shared_from_this()](beast::error_code ec, size_t n) {
                            // Closed meanwhile (shutdown or the cap): a completion already
                            // queued must not start a request on a closed connection.
                            if (self->phase_ == Phase::kClosed) return;
                            self->buffer_.commit(n);
                            if (ec || n == 0) return self->close();
                            self->begin_request();
                          });
}

void Connection::begin_request() {
  phase_ = Phase::kReading;
  start_ = Clock::now();
  method_.clear();  // (not = "-": GCC 12 raises a false -Wrestrict on that)
  path_.clear();
  request_id_.clear();
  route_ = srv_->metrics.other();
  scored_.reset();
  queue_ms_ = -1;
  origin_.reset();
  cookie_ = false;
  head_ = false;
  logged_ = false;
  counted_ = false;
  // One deadline for the whole request, headers and body: a client trickling bytes cannot
  // extend it (Beast's timer is absolute across the reads below).
  stream_.expires_after(seconds(opt().request_timeout_s));
  parser_.emplace();
  parser_->header_limit(static_cast<std::uint32_t>(opt().max_header_bytes));
  // No body limit while the header is read: a declared Content-Length over max_body is
  // refused by check_header() once every field is in, so that the 413 still carries the
  // client's request id; the limit proper is set before any body byte is read.
  parser_->body_limit(std::numeric_limits<std::uint64_t>::max());
  read_header();
}

// Feeds Beast's parser until the header is complete. Beast parses; this loop (what
// http::async_read_header does) exists so that the header's raw bytes can be seen once Beast
// has delimited them: Beast silently unfolds obs-fold continuation lines, which RFC 9112 5.2
// lets a server refuse, and which a front proxy may read differently (a folded
// Transfer-Encoding is a classic smuggling vector). Beast consumes nothing of a header until
// all of it is in the buffer, so the bytes it consumes at once are exactly the header.
void Connection::read_header() {
  if (buffer_.size() > 0) {
    beast::error_code ec;
    const size_t n = parser_->put(buffer_.data(), ec);
    if (!ec && parser_->is_header_done()) {
      const bool folded =
          has_obs_fold(std::string_view(static_cast<const char*>(buffer_.data().data()), n));
      buffer_.consume(n);
      if (folded)
        return send(detail(400,
                           "obsolete line folding (a header line starting with a space "
                           "or tab) is not accepted",
                           true));
      return on_header({});
    }
    buffer_.consume(n);
    if (ec && ec != http::error::need_more) return on_read_error(ec);
  }
  if (buffer_.size() >= buffer_.max_size()) return on_read_error(http::error::buffer_overflow);
  const size_t room = std::min<size_t>(65536, buffer_.max_size() - buffer_.size());
  stream_.async_read_some(buffer_.prepare(room),
                          [self = shared_from_this()](beast::error_code ec, size_t n) {
                            if (self->phase_ == Phase::kClosed) return;
                            self->buffer_.commit(n);
                            if (ec == asio::error::eof && self->buffer_.size() > 0)
                              ec = http::error::partial_message;
                            if (ec) return self->on_read_error(ec);
                            self->read_header();
                          });
}

void Connection::on_read_error(beast::error_code ec) {
  if ((ec == http::error::header_limit || ec == beast::http::error::buffer_overflow) && parser_ &&
      parser_->is_header_done())
    return send(
        detail(400, "a chunk-size line (with its extensions) or the trailer is too long", true));
  if (ec == http::error::header_limit || ec == beast::http::error::buffer_overflow)
    return send(detail(
        431,
        fmt::format("the request header section is larger than {} bytes", opt().max_header_bytes),
        true));
  if (ec == http::error::body_limit)
    return send(
        detail(413, fmt::format("the request body is larger than {} bytes", opt().max_body), true));
  const bool framing = ec.category() == http::make_error_code(http::error::bad_target).category();
  if (framing && ec != http::error::end_of_stream && ec != http::error::partial_message &&
      ec != http::error::need_more && ec != http::error::need_buffer)
    return send(detail(400, fmt::format("malformed HTTP request: {}", ec.message()), true));
  // Timeout (the socket is already closed), reset, or the client closed mid-request.
  if (ec == beast::error::timeout) log(408);
  close();
}

void Connection::on_header(beast::error_code ec) {
  if (ec) return on_read_error(ec);
  const Request& req = parser_->get();
  method_ = printable(std::string_view(req.method_string().data(), req.method_string().size()), 32);
  const std::string_view target(req.target().data(), req.target().size());
  path_ = printable(target);
  route_ = srv_->metrics.route(target_path(target).value_or(std::string_view()));
  head_ = req.method() == http::verb::head;
  // x-typesafe-request-id: the client's, echoed when sane, else a fresh one (request_id.h).
  auto id = req.find(kRequestIdHeader);
  request_id_ =
      request_id(id == req.end() ? std::string_view()
                                 : std::string_view(id->value().data(), id->value().size()));
  if (auto o = req.find(http::field::origin); o != req.end())
    origin_ = std::string(o->value().data(), o->value().size());
  cookie_ = req.find(http::field::cookie) != req.end();
  const auto length = parser_->content_length();
  if (auto r = check_header(req, length ? std::optional<uint64_t>(*length) : std::nullopt,
                            {.max_headers = opt().max_headers, .max_body = opt().max_body}))
    return send(detail(r->status, r->message, true));
  // Every body in memory at once stays under max_body_total: a chunked body reserves the
  // whole per-request limit, since its size is unknown until it ends.
  const size_t want = parser_->content_length() ? static_cast<size_t>(*parser_->content_length())
                      : parser_->chunked()      ? opt().max_body
                                                : 0;
  if (srv_->io_state->body_bytes + want > opt().max_body_total)
    return send(detail(503, "too many request bodies in memory; retry later", true));
  reserved_ = want;
  srv_->io_state->body_bytes += want;
  parser_->body_limit(opt().max_body);
  if (parser_->is_done()) return handle();
  // RFC 9110 10.1.1: an HTTP/1.0 request's 100-continue expectation is ignored (a 1.0 client
  // does not know the interim response).
  if (auto e = req.find(http::field::expect); e != req.end() && req.version() == 11) {
    // RFC 9110 10.1.1: the client waits for this before sending the body (curl does, over 1 MiB).
    auto cont =
        std::make_shared<http::response<http::empty_body>>(http::status::continue_, req.version());
    return http::async_write(stream_, *cont,
                             [self = shared_from_this(), cont](beast::error_code ec, size_t) {
                               if (ec) return self->close();
                               if (self->phase_ != Phase::kClosed) self->read_body();
                             });
  }
  read_body();
}

void Connection::read_body() {
  http::async_read(stream_, buffer_, *parser_,
                   [self = shared_from_this()](beast::error_code ec, size_t) {
                     if (self->phase_ == Phase::kClosed) return;
                     if (ec) return self->on_read_error(ec);
                     self->handle();
                   });
}

void Connection::handle() {
  std::variant<Reply, Endpoint> routed = route_request(*srv_, parser_->get());
  if (auto* reply = std::get_if<Reply>(&routed)) return send(std::move(*reply));
  submit(std::get<Endpoint>(routed));
}

// POST /v1/systemone[/permute|/separate]: into the FIFO queue; the worker posts the reply
// back to this thread.
void Connection::submit(Endpoint endpoint) {
  phase_ = Phase::kBusy;
  stream_.expires_never();
  auto self = shared_from_this();
  auto body = std::make_shared<const std::string>(std::move(parser_->get().body()));
  auto& io = srv_->io;
  const double wait_s = opt().queue_timeout_s;
  auto task = std::make_shared<ScoreTask>();
  task->body = body;
  task->endpoint = endpoint;
  task->alone = endpoint != Endpoint::kSystemOne;
  task->backlogged = backlogged();
  task->body_bytes = body->size();
  task->queued_at = Clock::now();
  task->on_reply = [self, &io](Reply r) {
    asio::post(io, [self, reply = std::make_shared<Reply>(std::move(r))] {
      self->stop_watching();
      self->queue_ms_ = reply->queue_ms;
      if (reply->cancelled) return self->cancelled();
      self->send(std::move(*reply));
    });
  };
  const Clock::time_point queued_at = task->queued_at;
  using Refusal = Admission<ScoreTask>::Refusal;
  bool queued = srv_->admission.submit(task, [self, &io, wait_s, queued_at](Refusal why) {
    const double waited = std::chrono::duration<double>(Clock::now() - queued_at).count();
    self->srv_->metrics.queue_wait(waited);
    asio::post(io, [self, wait_s, waited, why] {
      self->stop_watching();
      self->queue_ms_ = waited * 1000;
      if (why == Refusal::kDisplaced)
        return self->send(detail(503,
                                 "the server is busy and this connection has replies it has "
                                 "not read: its queued request gave its place to another "
                                 "client; read the replies, then retry"));
      self->send(
          detail(503, fmt::format("no scoring slot became free within {} s; retry later", wait_s)));
    });
  });
  if (!queued) {
    auto [inflight, waiting] = srv_->admission.counts();
    return send(detail(503, fmt::format("the server is busy ({} scoring, {} queued); retry later",
                                        inflight, waiting)));
  }
  watch_for_reset(task);
}

// While its task is queued or scoring, the connection watches its own socket for a reset and
// tells the task (ScoreTask::client_reset), whose work then stops at its next safe point: no
// worker touches a client's descriptor (it could be closed and reused by another client
// meanwhile). A reset (RST) shows as an error or hang-up on the socket; a FIN alone is not
// "gone": RFC 9112 lets a client half-close after sending its request and still read.
void Connection::watch_for_reset(const std::shared_ptr<ScoreTask>& task) {
  // Checked at once too, so that a reset that came with the body is seen before a worker
  // takes the task.
  if (reset_by_peer()) return task->client_reset.store(true);
  stream_.socket().async_wait(
      tcp::socket::wait_error,
      [self = shared_from_this(), task = std::weak_ptr<ScoreTask>(task),
       watch = watch_](beast::error_code ec) { self->on_watch(ec, task, watch); });
}

// The socket reported an exceptional condition: a reset, or urgent data (TCP's out-of-band
// byte, meaningless to HTTP). The urgent byte is dropped and the watch goes on: left unread,
// it would wake every new wait at once. If it cannot be read, the watch ends (the request is
// then computed whatever the client does, as after a FIN).
void Connection::on_watch(beast::error_code ec, const std::weak_ptr<ScoreTask>& task,
                          uint64_t watch) {
  if (ec || watch != watch_ || phase_ != Phase::kBusy) return;  // the reply came first
  auto t = task.lock();
  if (!t) return;
  if (reset_by_peer()) return t->client_reset.store(true);
  char byte;
  if (::recv(stream_.socket().native_handle(), &byte, 1, MSG_OOB | MSG_DONTWAIT) == 1)
    watch_for_reset(t);
}

bool Connection::reset_by_peer() {
  pollfd p{stream_.socket().native_handle(), POLLIN, 0};
  return ::poll(&p, 1, 0) > 0 && (p.revents & (POLLERR | POLLHUP)) != 0;
}

// The task's reply (or refusal) is here: a pending watch is cancelled and its completion, if
// already queued, is ignored.
void Connection::stop_watching() {
  ++watch_;
  beast::error_code ignored;
  stream_.socket().cancel(ignored);
}

// The client does not wait for its replies (Admission's fairness rule, admission.h): it has
// already sent more behind this request (pipelining), or this request was already sent when
// the previous reply on this connection was written, or reply bytes still wait in the
// kernel's send queue (the client is not reading).
bool Connection::backlogged() {
  beast::error_code ec;
  const bool more = buffer_.size() > 0 || (stream_.socket().available(ec) > 0 && !ec);
  int unsent = 0;
  if (::ioctl(stream_.socket().native_handle(), SIOCOUTQ, &unsent) != 0) unsent = 0;
  return more || pipelined_ || unsent > 0;
}

void Connection::cancelled() {
  log(499);  // nginx's "client closed request": stopped at a safe point, nothing sent
  close();
}

void Connection::release() {
  srv_->io_state->body_bytes -= reserved_;
  reserved_ = 0;
}

void Connection::send(Reply r) {
  if (phase_ == Phase::kClosed) return;  // a worker's reply for a connection closed meanwhile
  release();
  phase_ = Phase::kWriting;
  ++served_;
  status_ = r.status;
  scored_ = r.scored;
  count(r.status);
  const unsigned version =
      parser_ && parser_->is_header_done() && parser_->get().version() == 10 ? 10 : 11;
  auto res = std::make_shared<http::response<http::string_body>>(
      static_cast<http::status>(r.status), version);
  res->set(http::field::content_type, r.content_type);
  if (r.retry_after) res->set(http::field::retry_after, "1");
  if (!r.allow.empty()) res->set(http::field::allow, r.allow);
  for (const auto& [name, value] : r.headers) res->set(name, value);
  // Upstream's CORSMiddleware on a request with an Origin: any origin, the two headers below
  // readable by scripts; a request with cookies gets its origin echoed (Vary: Origin).
  if (origin_ && !r.preflight) {
    const bool echo = cookie_ && !origin_->empty() && printable_ascii(*origin_);
    res->set(http::field::access_control_allow_origin, echo ? *origin_ : std::string("*"));
    res->set(http::field::access_control_expose_headers, "x-typesafe-request-id, server-timing");
    if (echo) res->set(http::field::vary, "Origin");
  }
  // Upstream's typesafe middleware, on every response.
  if (request_id_.empty()) request_id_ = new_request_id();  // kept for this request's log
  res->set(kRequestIdHeader, request_id_);
  res->set("server-timing",
           fmt::format("app;dur={:.1f}",
                       std::chrono::duration<double, std::milli>(Clock::now() - start_).count()));
  res->body() = std::move(r.body);
  // After shutdown(): answer what is already buffered (pipelined), then close.
  // Near the connection cap (over 7/8 of it) a reply closes its connection: left idle there, it
  // would be evicted by a newcomer, possibly as its client sends the next request (which then
  // fails with no answer); a close announced in the reply is not racy.
  const bool crowded = srv_->io_state->connections.size() * 8 > opt().max_connections * 7;
  // What the client has already sent (pipelined) is answered in any case.
  beast::error_code ec;
  const bool more = buffer_.size() > 0 || (stream_.socket().available(ec) > 0 && !ec);
  pipelined_ = more;  // the next request was sent before this reply: see backlogged()
  const bool keep = !r.close && parser_ && parser_->is_done() && parser_->get().keep_alive() &&
                    ((srv_->io_state->accepting && !crowded) || more);
  res->keep_alive(keep);
  res->prepare_payload();
  // A reply to HEAD has the fields of the reply to GET and no body (RFC 9110 9.3.2): a body
  // here would be read as the start of the next response by the client or a proxy.
  if (head_) res->body().clear();
  // The request (and any body an unscored request carried) is no longer needed: free it now,
  // since release() has already returned its bytes to --max-body-total.
  parser_.reset();
  stream_.expires_after(seconds(opt().request_timeout_s));
  http::async_write(
      stream_, *res,
      [self = shared_from_this(), res, keep, linger = r.close](beast::error_code ec, size_t) {
        self->log(self->status_);
        if (ec) return self->close();
        if (!keep) return linger ? self->linger() : self->close();
        self->wait_request();
      });
}

// After an error reply the client may still be sending; closing now would reset the
// connection and could destroy the reply before it is read. Half-close and discard a bounded
// amount for a bounded time first.
void Connection::linger() {
  beast::error_code ignored;
  stream_.socket().shutdown(tcp::socket::shutdown_send, ignored);
  stream_.expires_after(kLingerTime);
  buffer_.clear();
  stream_.async_read_some(buffer_.prepare(4096),
                          [self = shared_from_this()](beast::error_code ec, size_t n) {
                            self->discarded_ += n;
                            if (ec || n == 0 || self->discarded_ > kLingerBytes)
                              return self->close();
                            self->linger();
                          });
}

// Metrics: once per request, when its reply is ready (or it is given up: 408, 499).
void Connection::count(int status) {
  if (counted_) return;
  counted_ = true;
  srv_->metrics.request(route_, status,
                        std::chrono::duration<double>(Clock::now() - start_).count());
}

// After the reply is written (or the request is given up): one line on stderr.
void Connection::log(int status) {
  count(status);
  if (!opt().log_requests || logged_) return;
  logged_ = true;
  const double ms = std::chrono::duration<double, std::milli>(Clock::now() - start_).count();
  if (opt().log_format == LogFormat::kText) {
    srv_->log.line(fmt::format("kev serve: {} {} {} {:.1f} ms", method_.empty() ? "-" : method_,
                               path_.empty() ? "-" : path_, status, ms));
    return;
  }
  if (request_id_.empty()) request_id_ = new_request_id();  // the request line was never read
  auto or_null = [](bool known, auto value) { return known ? OrderedJson(value) : OrderedJson(); };
  const bool scored = scored_.has_value();
  const ScoreUsage u = scored ? scored_->usage : ScoreUsage{};
  OrderedJson line = {{"ts", utc_timestamp(std::chrono::system_clock::now(), true)},
                      {"request_id", request_id_},
                      {"method", method_.empty() ? OrderedJson() : OrderedJson(method_)},
                      {"path", path_.empty() ? OrderedJson() : OrderedJson(path_)},
                      {"route", srv_->metrics.route_name(route_)},
                      {"status", status},
                      {"duration_ms", python_round(ms, 3)},
                      {"queue_ms", or_null(queue_ms_ >= 0, python_round(queue_ms_, 3))},
                      {"input_tokens", or_null(scored, u.input_tokens)},
                      {"state_tokens", or_null(scored, u.state_tokens)},
                      {"row_tokens", or_null(scored, u.input_tokens - u.state_tokens)},
                      {"cached", or_null(scored, u.cached_tokens > 0)},
                      {"truncated", or_null(scored, u.truncated)},
                      {"questions", or_null(scored, scored ? scored_->questions : 0)},
                      {"batch", or_null(scored, scored ? scored_->batch : 0)}};
  // Every string above is printable ASCII already; replace guards the line regardless.
  const std::string text = line.dump(-1, ' ', false, OrderedJson::error_handler_t::replace);
  srv_->log.line(text);
}

void Connection::close() {
  if (phase_ == Phase::kClosed) return;
  phase_ = Phase::kClosed;
  release();
  beast::error_code ignored;
  stream_.socket().shutdown(tcp::socket::shutdown_both, ignored);
  stream_.close();
  srv_->connection_closed(this);
}

bool Connection::rejecting() const {
  return reject_;
}

}  // namespace kev
