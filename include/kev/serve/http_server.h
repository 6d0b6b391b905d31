// HttpServer: the System1-Omni-compatible HTTP API over one Scorer, on Boost.Beast/Asio (HTTP/1.1
// parsing by Beast; framing policy, limits and lifecycle here). What clients see (the routes,
// bodies, headers, auth, every status) is documented once, in docs/api.md ("Endpoints",
// "Headers", "Statuses and errors", "Authentication") and the OpenAPI document the server serves
// (src/serve/openapi.json); the route table is src/serve/routes.cpp, the parts of the server
// are listed in src/serve/server_state.h.
//
// Contract: every error is {"detail": msg}, valid UTF-8 JSON whatever the client sent (paths,
// methods and model names shown as printable ASCII, other bytes as %XX); a request either gets
// the whole response or an error, never partial answers; requests on one connection (pipelined
// or not) are answered in order; the limits of ServeOptions below hold for every client.
// Admission: max_inflight worker threads; a free worker takes up to max_batch requests from
// the front of the queue (what is queued then; it never waits for more) and scores them in one
// pass (Scorer::score_batch: their question rows in one model pass, each on its own state
// prefix). Beyond the busy workers at most max_queue wait, first in first out, each at most
// queue_timeout_s; beyond that a request is answered 503 at once. Every request of a batch gets
// bitwise the status and body it would get alone (latency_ms aside), its own error, its own
// deadline and its own 499: a request whose client reset the connection stops before scoring
// or after its state prefix. on_batch (if set) sees each pass's size; /health "batches" counts.
// Lifecycle (thread-safe calls, e.g. from a signal watcher): bind() listens at once; start()
// serves in background threads (/v1/* answers 503 "loading"); set_ready() makes it score;
// drain() turns /health/ready to 503 but keeps serving; shutdown() stops accepting, closes idle
// connections, answers every request already received; wait() returns when all are answered.
#pragma once
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "kev/score/bundle.h"
#include "kev/score/scorer.h"

namespace kev {

// The request log on stderr: kText "kev serve: METHOD PATH STATUS N ms"; kJson one JSON object a
// line (ts, request_id, method, path, route, status, duration_ms, queue_ms, tokens, cached, batch).
enum class LogFormat { kText, kJson };

struct ServeOptions {
  std::string host = "127.0.0.1";
  int port = 8000;          // 0: any free port
  size_t max_inflight = 1;  // worker threads, each scoring one batch at a time
  size_t max_batch = 8;     // requests a worker takes from the queue into one model pass
  size_t max_queue = 16;
  double queue_timeout_s = 30;  // longest wait for a scoring slot, then 503
  size_t max_body = size_t{4} << 20;
  size_t max_body_total = size_t{256} << 20;  // every body in memory at once, else 503 + close
  // Bytes the requests being scored may hold together (keys/values, GDN states, forward scratch;
  // docs/serving.md "Memory"): a batch waits for room (503 at its queue deadline), a request
  // that alone needs more is 413. 0: half the machine's memory less the scorer's cache_bytes.
  size_t memory_budget = 0;
  size_t max_connections = 1024;  // beyond: an idle or the slowest reader is closed, else 503
  size_t max_header_bytes = 16384;
  size_t max_headers = 100;
  double request_timeout_s = 10;  // first byte to last body byte, and each response write
  double idle_timeout_s = 5;      // keep-alive wait for the next request's first byte
  JsonLimits json = {.max_object_keys = 16384, .max_array_elements = 16384};
  bool log_requests = true;  // one line per request on stderr
  LogFormat log_format = LogFormat::kText;
  // Bearer auth (upstream KEV_API_KEY): non-empty = every path starting with /v1 needs
  // "Authorization: Bearer <api_key>", else 401 + WWW-Authenticate: Bearer. /health* and CORS
  // preflights stay open. Compared as SHA-256 digests, without data-dependent branches.
  std::string api_key;
  // Upstream KEV_DATE_FACTS: add day counts between the absolute dates of each state
  // (with_date_facts in text/api.h) before scoring.
  bool date_facts = false;
  // Called on a worker thread once per model pass with the number of requests scored together
  // in it (>= 1; requests refused before scoring, e.g. malformed, expired or reset, are not
  // counted). For metrics: must be thread-safe and quick; empty: not called.
  std::function<void(size_t)> on_batch;
};

class HttpServer {
 public:
  explicit HttpServer(ServeOptions options);
  ~HttpServer();  // shutdown() + wait()
  HttpServer(const HttpServer&) = delete;
  HttpServer& operator=(const HttpServer&) = delete;

  // Binds and listens on host:port; returns the bound port. Error(kIo) naming the address.
  int bind();
  void start();
  // The scorer must outlive wait(). bundle: what GET /v1/models describes.
  void set_ready(const Scorer& scorer, BundleInfo bundle);
  void drain();
  void shutdown();
  // After a drain's deadline: work in flight stops at its next safe point (inside a state's
  // prefill, every kPrefillStepTokens) and every request not yet answered gets 503 +
  // Retry-After, so wait() returns within about one prefill step and one row batch.
  void stop_work();
  void wait();
  // One line (no newline) on stderr, written by the server's log thread: never blocks the
  // caller, even when nobody reads stderr (the request log uses the same queue).
  void log_line(std::string line);

  // The state the server's parts share (src/serve/server_state.h); not for callers.
  struct Impl;

 private:
  std::shared_ptr<Impl> impl_;
};

}  // namespace kev
