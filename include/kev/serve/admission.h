// Admission: the FIFO queue in front of the scoring workers, with its batching policy,
// per-request deadlines and drain (the policy ServeOptions max_inflight / max_batch / max_queue /
// queue_timeout_s describe in http_server.h).
//
// - start(runner): max_inflight worker threads and one sweeper thread. A free worker takes up to
//   max_batch tasks from the front of the queue (what is queued then; it never waits for more)
//   and hands them to the runner in FIFO order as one batch. A task marked `alone` is taken in a
//   batch of its own (and ends the batch in front of it).
// - submit(): false when busy workers + queued tasks reach max_inflight + max_queue (the caller
//   answers 503 at once); else the task waits at most `wait`. A task still queued past its
//   deadline is expired: its `expire` runs (on the sweeper, or on the worker that meets it),
//   and it is never given to the runner.
// - stop(): the workers run every task still queued (drain), then every thread is joined.
// Ownership: the queue owns each task until a worker or the sweeper takes it. Thread-safe:
// submit() and counts() from any thread; runner and expire run on Admission's threads, never
// under its lock; an exception they throw is logged on stderr, the thread goes on.
#pragma once
#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <thread>
#include <utility>
#include <vector>

namespace kev {

// What Admission needs of a queued task; the server derives its scoring task from it.
struct AdmissionTask {
  virtual ~AdmissionTask() = default;
  bool alone = false;     // scored in a batch of its own (never shares a model pass)
  size_t body_bytes = 0;  // after a batch of >= 1 MiB of bodies, freed memory is returned
};

class Admission {
 public:
  using Clock = std::chrono::steady_clock;
  // On a worker thread: handles the tasks of one batch (FIFO order) and returns, per task, what
  // sends its reply (run once the batch is no longer counted in flight).
  using Runner = std::function<std::vector<std::function<void()>>(
      const std::vector<std::shared_ptr<AdmissionTask>>&)>;

  Admission(size_t max_inflight, size_t max_queue, size_t max_batch, Clock::duration wait)
      : max_inflight_(max_inflight), max_queue_(max_queue), max_batch_(max_batch), wait_(wait) {}
  ~Admission() { stop(); }
  Admission(const Admission&) = delete;
  Admission& operator=(const Admission&) = delete;

  void start(Runner runner);
  // false: full (the caller answers 503 at once). A worker that is free takes the task at once;
  // beyond the busy workers, at most max_queue tasks wait.
  bool submit(std::shared_ptr<AdmissionTask> task, std::function<void()> expire);
  // {requests scoring (every request of every batch in progress), requests waiting}
  std::pair<size_t, size_t> counts() const;
  // Runs every task still queued, then joins the threads. Idempotent.
  void stop();

 private:
  struct Job {
    Clock::time_point deadline;
    std::shared_ptr<AdmissionTask> task;
    std::function<void()> expire;  // on the sweeper or a worker thread
  };

  void work();
  void sweep();

  const size_t max_inflight_, max_queue_, max_batch_;
  const Clock::duration wait_;
  Runner runner_;
  mutable std::mutex mutex_;
  std::condition_variable work_cv_, sweep_cv_;
  std::deque<Job> queue_;
  size_t inflight_ = 0;  // requests in the batches being scored
  size_t busy_ = 0;      // workers scoring a batch
  bool stopping_ = false;
  std::vector<std::thread> threads_;
};

}  // namespace kev
