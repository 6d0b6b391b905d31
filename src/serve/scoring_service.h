// ScoringService: request bodies to replies, on the admission workers. One batch taken from
// the queue (Admission) becomes one Reply per task: each task is checked for a reset client,
// decoded (kev/text/request_decoder.h, as `kev score` decodes) and
// the requests left are scored together in one model pass (Scorer::score_batch); permute and
// separate run alone, one pass per question or permutation. Every task gets the status and
// body it would get alone.
//
// Memory (admission_memory.h): each request's need is computed from its encoding before it is
// scored; one that alone needs more than the budget is refused (413), and the requests of a
// batch are scored in consecutive groups that each fit, each group once its bytes are reserved
// (503 + Retry-After if that does not happen by the first task's queue deadline).
//
// Ownership: holds references to the server's options and metrics (which outlive it); the
// Scorer is published once (publish(), from HttpServer::set_ready) and must outlive the server.
// Thread-safe: run() is called on any number of worker threads at once; the counters are atomics.
#pragma once
#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <exception>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <variant>
#include <vector>

#include "kev/score/scorer.h"
#include "kev/serve/admission.h"
#include "kev/serve/http_server.h"
#include "kev/serve/metrics.h"
#include "kev/text/request_decoder.h"
#include "serve/admission_memory.h"
#include "serve/reply.h"

namespace kev {

// The POST endpoints that go through admission.
enum class Endpoint { kSystemOne, kPermute, kSeparate };

// One POST /v1/systemone[/permute|/separate] in the admission queue.
struct ScoreTask : AdmissionTask {
  Endpoint endpoint = Endpoint::kSystemOne;
  std::chrono::steady_clock::time_point queued_at;
  std::shared_ptr<const std::string> body;
  // Set by the client's connection, on the I/O thread, when the client resets it (RST) while the
  // task is queued or scoring; workers read this flag and never touch the client's socket.
  std::atomic<bool> client_reset{false};
  // Sends the task's reply (or, when cancelled, closes), on a worker thread once the request
  // no longer counts as in flight: Admission's delivery (kev/serve/admission.h).
  using Result = Reply;
  std::function<void(Reply)> on_reply;
  void deliver(Reply r) { on_reply(std::move(r)); }
};

struct ScoringService {
  ScoringService(const ServeOptions& o, ServeMetrics& m) : options(o), metrics(m) {}

  // On a worker thread (Admission's runner): one reply per task of a batch, in order (out of
  // memory while bookkeeping the batch answers every task 503). Admission delivers them.
  std::vector<Reply> run(const std::vector<std::shared_ptr<ScoreTask>>& tasks) const;

  // Counts one model pass of `requests` requests scored together (/health, /v1/models, and
  // ServeOptions::on_batch for /metrics).
  void count_pass(size_t requests) const;

  // Sets up memory accounting for `s` (budget: options.memory_budget, or the default), then
  // makes it the scorer. Once.
  void publish(const Scorer& s);
  // The budget, once published (else null).
  const MemoryBudget* memory() const { return scorer.load() ? budget_.get() : nullptr; }

  const ServeOptions& options;
  ServeMetrics& metrics;  // thread-safe (atomic counters)
  std::atomic<const Scorer*> scorer{nullptr};
  // Set when a drain's deadline passed (HttpServer::stop_work): work in flight stops at its
  // next safe point (Scorer::score's gone()) and every request not yet answered, queued or in
  // flight, is answered 503 + Retry-After.
  std::atomic<bool> stopping{false};
  // Model passes (batches scored together) and the requests in them; any thread.
  mutable std::atomic<uint64_t> passes{0}, batched{0};
  mutable std::atomic<size_t> largest_batch{0};

 private:
  // The JSON path for one POST /v1/systemone body: a request to score or the reply refusing it.
  std::variant<ApiRequest, Reply> parse(const std::string& body) const;
  // Upstream's demo endpoints (permute, separate), each request on its own.
  Reply score_alone(const ScoreTask& task, const std::function<bool()>& gone) const;
  // The request's encoding, made once per request (null when it is refused: the scorer then
  // gives the refusal), and the bytes scoring it will hold (0 for null).
  std::shared_ptr<const Encoding> encode(const ApiRequest& request) const;
  size_t need(const Encoding* enc) const;
  // The 413 for a request that alone needs more than the budget.
  Reply too_large(size_t need) const;
  // The 503 for a request that found no memory by its deadline.
  Reply no_memory() const;
  std::chrono::steady_clock::time_point deadline(const ScoreTask& task) const;
  // The reply to a request whose parsing or scoring threw `error`.
  Reply error_reply(std::exception_ptr error, const std::function<bool()>& gone) const;
  // The gone() of a task: its client reset the connection, or `stopping`.
  std::function<bool()> gone_for(const ScoreTask& task) const;
  // The 503 of a request stopped (or not started) because the drain's deadline passed.
  static Reply shutting_down();
  // One batch, in FIFO order: each task's queue wait recorded, then score_tasks.
  std::vector<Reply> score_batch(const std::vector<std::shared_ptr<ScoreTask>>& tasks) const;
  void score_tasks(const std::vector<std::shared_ptr<ScoreTask>>& tasks,
                   std::vector<Reply>& replies) const;
  void score_group(std::span<const ScoreJob> jobs, std::span<const size_t> of,
                   std::vector<Reply>& replies) const;
  DecodeOptions decode_options() const { return {options.json, options.date_facts}; }

  // Written by publish() before the scorer, read after it is seen.
  std::unique_ptr<MemoryBudget> budget_;
  RequestMemory per_request_;
};

}  // namespace kev
