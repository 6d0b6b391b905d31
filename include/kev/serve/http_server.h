// HttpServer: the System1-Omni-compatible HTTP API over one Scorer (REFERENCE.md section 8).
//
//   POST /v1/systemone  request JSON -> the Scorer's response JSON (application/json)
//   GET  /health        {"status":"ok","model","ready","inflight","queued","cache":{...}}
//   GET  /health/live   200 {"status":"live"} whenever the process answers at all
//   GET  /health/ready  200 {"status":"ready","model"} when loaded and not draining, else
//                       503 + Retry-After: 1 with {"status":"loading"} or {"status":"draining"}
//   GET  /v1/models
//   {"object":"list","data":[{"id":<model>,"object":"model"},{"id":"kev-latest",...}]}
//
// Contract: every error is {"detail": msg} with 400 malformed JSON, 413 body over max_body,
// 422 invalid semantics / context overflow / unknown model, 503 busy (with Retry-After),
// 500 internal, 404 unknown path, 405 wrong method on a known path. A request either gets the
// whole response or an error, never partial answers.
// Admission: at most max_inflight requests score at once and at most max_queue wait for a
// slot; any request beyond that is answered 503 at once. The connection thread pool is sized
// so that admitted + rejected requests never wait behind each other inside the HTTP layer.
// Lifecycle: a server built without a Scorer answers /v1/* with 503 + Retry-After ("loading")
// until set_scorer(); drain() turns it not-ready (it keeps serving normally until stop()).
// stop() (thread-safe, e.g. from a signal watcher) stops accepting; run() returns after every
// request already read has been answered.
#pragma once
#include <cstddef>
#include <memory>
#include <string>

#include "kev/serve/scorer.h"

namespace kev {

struct ServeOptions {
  std::string host = "127.0.0.1";
  int port = 8000;  // 0: any free port
  size_t max_inflight = 1;
  size_t max_queue = 16;
  size_t max_body = size_t{4} << 20;
  bool log_requests = true;  // one line per request on stderr
};

class HttpServer {
 public:
  // model_name: the bundle's model (kev_export.json "model"); "kev-latest" is its alias.
  HttpServer(const Scorer& scorer, std::string model_name, ServeOptions options);
  // Not ready until set_scorer(): binds and answers health while the bundle loads.
  HttpServer(std::string model_name, ServeOptions options);
  ~HttpServer();
  HttpServer(const HttpServer&) = delete;
  HttpServer& operator=(const HttpServer&) = delete;

  // Binds host:port; returns the bound port. Error(kIo) naming the address on failure.
  int bind();
  // Serves until stop(); returns once every accepted request has been answered.
  void run();
  void stop();
  // Thread-safe. `scorer` must outlive run().
  void set_scorer(const Scorer& scorer);
  void drain();

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// The served model's name from a bundle's manifest (kev_export.json "model").
std::string bundle_model_name(const std::string& bundle_dir);

}  // namespace kev
