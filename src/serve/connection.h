// Connection: one client's TCP connection, on the I/O thread. It reads a request (Beast parses;
// http_framing.h checks what Beast lets through), routes it (routes.h), queues a scored route
// into Admission and writes the reply the worker posts back, then waits for the next request
// (keep-alive, pipelining answered in order) or closes.
//
// Bounds: one deadline per request (first byte to last body byte, ServeOptions
// request_timeout_s) and per reply write; idle_timeout_s between requests; header bytes, field
// count and body size as ServeOptions says; every body in memory at once under max_body_total.
// Ownership: shared (each pending completion holds it); registered in the server's connection
// set until close(). Thread safety: every member runs on the I/O thread only.
#pragma once
#include <boost/asio/ip/tcp.hpp>
#include <chrono>
#include <memory>

#include "kev/serve/http_server.h"

namespace kev {

class Connection {
 public:
  using Clock = std::chrono::steady_clock;

  // reject: over the connection cap with no room made: answered 503 and closed.
  static std::shared_ptr<Connection> make(std::shared_ptr<HttpServer::Impl> server,
                                          boost::asio::ip::tcp::socket socket, bool reject);
  virtual ~Connection() = default;

  virtual void start() = 0;
  // Waiting for a next request with nothing of it received, in our buffer or the kernel's.
  virtual bool idle() = 0;
  // Idle after serving at least one request, for a while: may be closed to make room.
  virtual bool idle_between_requests() = 0;
  // Reading a request (since started()).
  virtual bool reading() const = 0;
  virtual Clock::time_point started() const = 0;
  // Closed to make room at the connection cap (a request being read is logged 408).
  virtual void evict() = 0;
  virtual void close() = 0;
  // Made with reject = true.
  virtual bool rejecting() const = 0;
};

}  // namespace kev
