// Connection: one client's TCP connection, a state machine on the I/O thread: kIdle (keep-alive
// wait) -> kReading (header, framing checks, body) -> kBusy (queued or scoring) -> kWriting ->
// kIdle again, or kClosed. It reads a request (Beast parses; http_framing.h checks what Beast
// lets through), asks route_request (routes.h) what to do with it, queues a scored route into
// Admission, watches its own socket for a reset while that request is queued or scoring
// (ScoreTask::client_reset), writes the reply Admission's delivery posts back, then waits for the
// next request (keep-alive, pipelining answered in order) or closes.
//
// Bounds: one deadline per request (first byte to last body byte, ServeOptions
// request_timeout_s) and per reply write; idle_timeout_s between requests; header bytes, field
// count and body size as ServeOptions says; every body in memory at once under max_body_total.
// Ownership: shared (each pending completion holds it); registered in the server's connection
// set until close(). Thread safety: every member runs on the I/O thread only.
#pragma once
#include <boost/asio/ip/tcp.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>

#include "kev/serve/http_server.h"
#include "serve/reply.h"
#include "serve/scoring_service.h"

namespace kev {

class Connection : public std::enable_shared_from_this<Connection> {
 public:
  using Clock = std::chrono::steady_clock;
  using tcp = boost::asio::ip::tcp;

  // reject: over the connection cap with no room made: answered 503 and closed.
  Connection(std::shared_ptr<HttpServer::Impl> server, tcp::socket socket, bool reject);

  void start();
  // Waiting for a next request with nothing of it received, in our buffer or the kernel's.
  bool idle();
  // Idle after serving at least one request, for a while: may be closed to make room.
  bool idle_between_requests();
  // Reading a request (since started()).
  bool reading() const;
  Clock::time_point started() const;
  // Closed to make room at the connection cap (a request being read is logged 408).
  void evict();
  void close();
  // Made with reject = true.
  bool rejecting() const;

 private:
  enum class Phase { kIdle, kReading, kBusy, kWriting, kClosed };

  const ServeOptions& opt() const;
  void wait_request();
  void begin_request();
  void read_header();
  void on_read_error(boost::beast::error_code ec);
  void on_header(boost::beast::error_code ec);
  void read_body();
  void handle();
  void submit(Endpoint endpoint);
  void watch_for_reset(const std::shared_ptr<ScoreTask>& task);
  void on_watch(boost::beast::error_code ec, const std::weak_ptr<ScoreTask>& task, uint64_t watch);
  bool reset_by_peer();
  void stop_watching();
  bool backlogged();
  void cancelled();
  void release();
  void send(Reply r);
  void linger();
  void count(int status);
  void log(int status);

  std::shared_ptr<HttpServer::Impl> srv_;
  boost::beast::tcp_stream stream_;
  boost::beast::flat_buffer buffer_;
  std::optional<boost::beast::http::request_parser<boost::beast::http::string_body>> parser_;
  bool reject_;
  Phase phase_ = Phase::kIdle;
  Clock::time_point start_ = Clock::now();
  std::string method_, path_;  // printable; empty until the request line is parsed
  std::string request_id_;     // the client's x-typesafe-request-id when sane, else generated
  size_t route_;               // metrics label index (other() until a request line is read)
  std::optional<Scored> scored_;
  double queue_ms_ = -1;               // time in the scoring queue; < 0: never queued
  std::optional<std::string> origin_;  // the request's Origin header
  bool cookie_ = false;                // the request carries a Cookie header
  bool head_ = false;                  // the request is a HEAD: its reply carries no body
  int status_ = 0;
  bool logged_ = false, counted_ = false;
  size_t discarded_ = 0;
  size_t reserved_ = 0;     // of srv_->io_state->body_bytes
  size_t served_ = 0;       // replies sent on this connection
  bool pipelined_ = false;  // the next request had arrived when the last reply was written
  uint64_t watch_ = 0;      // watch_for_reset generation (stop_watching ends one)
  Clock::time_point idle_since_ = Clock::now();  // when it last became idle
};

}  // namespace kev
