// Admission: the queue in front of the scoring workers, with its batching policy, its fairness
// rule, per-request deadlines and drain (the policy ServeOptions max_inflight / max_batch /
// max_queue / queue_timeout_s describe in http_server.h).
//
// Fairness: a task is `backlogged` when its client has replies it has not read (the server
// sets it: the request was pipelined behind an unsent or unread reply). Such a client does not
// hold places that others need: fresh tasks (every other) wait in a FIFO of their own that
// workers serve first, in batches of up to max_batch; backlogged tasks wait in a second FIFO,
// served only when no fresh task waits, one per batch (so a fresh request never waits behind
// more than one backlogged request's pass); and a fresh task that finds the queue full takes
// the place of the newest backlogged task, which is refused (kDisplaced) instead of it. Each
// connection holds at most one task at a time (its requests are answered in order), so FIFO
// order among fresh tasks is round-robin among connections.
//
// - start(runner): max_inflight worker threads and one sweeper thread. A free worker takes up to
//   max_batch fresh tasks from the front of their queue (what is queued then; it never waits for
//   more), or else one backlogged task, and hands them to the runner in FIFO order as one batch.
//   A task marked `alone` is taken in a batch of its own (and ends the batch in front of it).
//   The runner returns one result per task; once the batch no longer counts in flight, the
//   worker delivers each to its task (Task::deliver), in order, so that a client that sends its
//   next request on seeing a reply never finds its last one still counted.
// - submit(): false when busy workers + queued tasks reach max_inflight + max_queue and no
//   backlogged task can give way to it (the caller answers 503 at once); else the task waits at
//   most `wait`. A task still queued past its deadline is expired: its `refuse` runs with
//   kExpired (on the sweeper, or on the worker that meets it), and it is never given to the
//   runner; a displaced task's `refuse` runs with kDisplaced on the submitting thread, after
//   submit() has released the lock.
// - stop(): the workers run every task still queued (drain), then every thread is joined.
// Types: Admission<Task> queues one kind of task (Task derives from AdmissionTask, names its
// Result and takes it with deliver()) and hands the runner that same type, so nothing
// downstream casts; the queue itself (AdmissionQueue, one compiled implementation) sees only
// AdmissionTask.
// Ownership: the queue owns each task until a worker or the sweeper takes it. Thread-safe:
// submit() and counts() from any thread; runner and refuse never run under Admission's lock; an
// exception they throw on Admission's threads is logged through start()'s `log` (the server's
// log sink: Admission writes nothing itself), the thread goes on.
#pragma once
#include <chrono>
#include <concepts>
#include <condition_variable>
#include <cstddef>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <stdexcept>
#include <string>
#include <thread>
#include <utility>
#include <vector>

namespace kev {

// What Admission needs of a queued task; the server derives its scoring task from it.
struct AdmissionTask {
  bool alone = false;       // scored in a batch of its own (never shares a model pass)
  bool backlogged = false;  // its client has unread replies: queued behind every fresh task
  size_t body_bytes = 0;    // after a batch of >= 1 MiB of bodies, freed memory is returned
};

// The queue over AdmissionTask; Admission<Task> below is what callers use.
class AdmissionQueue {
 public:
  using Clock = std::chrono::steady_clock;
  // Why a queued task is given up without being run.
  enum class Refusal { kExpired, kDisplaced };
  using Refuse = std::function<void(Refusal)>;
  // On a worker thread: handles the tasks of one batch (FIFO order) and returns, per task, what
  // delivers its result (run once the batch is no longer counted in flight).
  using Runner = std::function<std::vector<std::function<void()>>(
      const std::vector<std::shared_ptr<AdmissionTask>>&)>;

  AdmissionQueue(size_t max_inflight, size_t max_queue, size_t max_batch, Clock::duration wait)
      : max_inflight_(max_inflight), max_queue_(max_queue), max_batch_(max_batch), wait_(wait) {}
  ~AdmissionQueue() { stop(); }
  AdmissionQueue(const AdmissionQueue&) = delete;
  AdmissionQueue& operator=(const AdmissionQueue&) = delete;

  // One line (no newline) about an internal error; required.
  using Log = std::function<void(std::string)>;
  void start(Runner runner, Log log);
  // false: full (the caller answers 503 at once). A worker that is free takes the task at once;
  // beyond the busy workers, at most max_queue tasks wait (a fresh task may displace the newest
  // backlogged one).
  bool submit(std::shared_ptr<AdmissionTask> task, Refuse refuse);
  // {requests scoring (every request of every batch in progress), requests waiting}
  std::pair<size_t, size_t> counts() const;
  // Runs every task still queued, then joins the threads. Idempotent.
  void stop();

 private:
  struct Job {
    Clock::time_point deadline;
    std::shared_ptr<AdmissionTask> task;
    Refuse refuse;  // on the sweeper, a worker or the submitting thread
  };

  void work();
  void sweep();
  size_t queued() const { return fresh_.size() + backlog_.size(); }

  const size_t max_inflight_, max_queue_, max_batch_;
  const Clock::duration wait_;
  // f() on a worker or the sweeper; what it throws (only out of memory can get there: the runner
  // turns every scoring error into a reply) is logged instead of ending the thread.
  template <class F>
  void guarded(const char* what, F&& f) const;

  Runner runner_;
  Log log_;
  mutable std::mutex mutex_;
  std::condition_variable work_cv_, sweep_cv_;
  std::deque<Job> fresh_, backlog_;  // each in arrival (= deadline) order
  size_t inflight_ = 0;              // requests in the batches being scored
  size_t busy_ = 0;                  // workers scoring a batch
  bool stopping_ = false;
  std::vector<std::thread> threads_;
};

// A task Admission<Task> can queue: an AdmissionTask that names its Result and takes it.
template <class Task>
concept AdmittedTask = std::derived_from<Task, AdmissionTask> &&
    std::move_constructible<typename Task::Result> &&
    requires(Task& task, typename Task::Result result) {
  task.deliver(std::move(result));
};

// The queue for one type of task: the runner receives the tasks as submitted and returns their
// results, which Admission delivers after its bookkeeping.
template <AdmittedTask Task>
class Admission {
 public:
  using Clock = AdmissionQueue::Clock;
  using Refusal = AdmissionQueue::Refusal;
  using Refuse = AdmissionQueue::Refuse;
  using Log = AdmissionQueue::Log;
  using Result = typename Task::Result;
  // One result per task, in the order given (another count is an internal error: logged, and
  // no task of the batch gets a result).
  using Runner = std::function<std::vector<Result>(const std::vector<std::shared_ptr<Task>>&)>;

  Admission(size_t max_inflight, size_t max_queue, size_t max_batch, Clock::duration wait)
      : queue_(max_inflight, max_queue, max_batch, wait) {}

  void start(Runner runner, Log log) {
    queue_.start(
        [run = std::move(runner)](const std::vector<std::shared_ptr<AdmissionTask>>& queued) {
          std::vector<std::shared_ptr<Task>> tasks;
          tasks.reserve(queued.size());
          // Every task in the queue came through submit() below, so each is a Task.
          for (const auto& t : queued) tasks.push_back(std::static_pointer_cast<Task>(t));
          std::vector<Result> results = run(tasks);
          if (results.size() != tasks.size())
            throw std::logic_error("the runner returned " + std::to_string(results.size()) +
                                   " results for " + std::to_string(tasks.size()) + " tasks");
          std::vector<std::function<void()>> deliveries;
          deliveries.reserve(tasks.size());
          for (size_t i = 0; i < tasks.size(); ++i)
            deliveries.push_back(
                [task = tasks[i], result = std::make_shared<Result>(std::move(results[i]))] {
                  task->deliver(std::move(*result));
                });
          return deliveries;
        },
        std::move(log));
  }
  bool submit(std::shared_ptr<Task> task, Refuse refuse) {
    return queue_.submit(std::move(task), std::move(refuse));
  }
  std::pair<size_t, size_t> counts() const { return queue_.counts(); }
  void stop() { queue_.stop(); }

 private:
  AdmissionQueue queue_;
};

}  // namespace kev
