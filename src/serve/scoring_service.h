// ScoringService: request bodies to replies, on the admission workers. One batch taken from
// the queue (Admission) becomes one Reply per task: each body is checked for a reset client,
// decoded (kev/text/request_decoder.h, as `kev score` decodes) and
// the requests left are scored together in one model pass (Scorer::score_batch); permute and
// separate run alone, one pass per question or permutation. Every task gets the status and
// body it would get alone.
//
// Ownership: holds references to the server's options and metrics (which outlive it); the
// Scorer is published once (HttpServer::set_ready) and must outlive the server. Thread-safe:
// run() is called on any number of worker threads at once; the counters are atomics.
#pragma once
#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <exception>
#include <functional>
#include <memory>
#include <string>
#include <variant>
#include <vector>

#include "kev/serve/admission.h"
#include "kev/serve/http_server.h"
#include "kev/serve/metrics.h"
#include "kev/serve/scorer.h"
#include "kev/text/request_decoder.h"
#include "serve/reply.h"

namespace kev {

// The POST endpoints that go through admission.
enum class Endpoint { kSystemOne, kPermute, kSeparate };

// One POST /v1/systemone[/permute|/separate] in the admission queue.
struct ScoreTask : AdmissionTask {
  Endpoint endpoint = Endpoint::kSystemOne;
  std::chrono::steady_clock::time_point queued_at;
  std::shared_ptr<const std::string> body;
  int fd = -1;  // the client's socket, polled for a reset (peer_reset)
  // On a worker thread, with the task's reply (or cancelled); returns what sends it, to be run
  // once the request no longer counts as in flight.
  std::function<std::function<void()>(Reply)> reply;
};

struct ScoringService {
  ScoringService(const ServeOptions& o, ServeMetrics& m) : options(o), metrics(m) {}

  // On a worker thread: one reply per task of a batch, in order (never throws: out of memory
  // while bookkeeping the batch answers every task 503).
  std::vector<Reply> run(const std::vector<std::shared_ptr<ScoreTask>>& tasks) const;

  // Counts one model pass of `requests` requests scored together (/health, /v1/models, and
  // ServeOptions::on_batch for /metrics).
  void count_pass(size_t requests) const;

  const ServeOptions& options;
  ServeMetrics& metrics;  // thread-safe (atomic counters)
  std::atomic<const Scorer*> scorer{nullptr};
  // Model passes (batches scored together) and the requests in them; any thread.
  mutable std::atomic<uint64_t> passes{0}, batched{0};
  mutable std::atomic<size_t> largest_batch{0};

 private:
  // The JSON path for one POST /v1/systemone body: a request to score or the reply refusing it.
  std::variant<ApiRequest, Reply> parse(const std::string& body) const;
  // Upstream's demo endpoints (permute, separate), each request on its own.
  Reply score_alone(Endpoint endpoint, const std::string& body,
                    const std::function<bool()>& gone) const;
  // The reply to a request whose parsing or scoring threw `error`.
  static Reply error_reply(std::exception_ptr error, const std::function<bool()>& gone);
  // One batch, in FIFO order: each task's queue wait recorded, then score_tasks.
  std::vector<Reply> score_batch(const std::vector<std::shared_ptr<ScoreTask>>& tasks) const;
  void score_tasks(const std::vector<std::shared_ptr<ScoreTask>>& tasks,
                   std::vector<Reply>& replies) const;
  DecodeOptions decode_options() const { return {options.json, options.date_facts}; }
};

}  // namespace kev
