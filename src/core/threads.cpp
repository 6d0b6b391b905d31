#include "kev/core/threads.h"

#include <atomic>
#include <condition_variable>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "kev/core/error.h"

namespace kev {

namespace {

// KEV_THREADS as a count; 0 when unset or not a whole number in [1, kMaxThreads].
size_t env_threads(const char* v) {
  if (v == nullptr || *v == '\0' || std::strlen(v) > 4) return 0;
  size_t n = 0;
  for (const char* c = v; *c; ++c) {
    if (*c < '0' || *c > '9') return 0;
    n = n * 10 + static_cast<size_t>(*c - '0');
  }
  return n <= kMaxThreads ? n : 0;
}

}  // namespace

size_t default_workers() {
  if (const size_t n = env_threads(std::getenv("KEV_THREADS"))) return n;
  unsigned hc = std::thread::hardware_concurrency();
  return hc ? hc : 1;
}

void check_threads_environment() {
  const char* v = std::getenv("KEV_THREADS");
  if (v != nullptr && *v != '\0' && env_threads(v) == 0)
    fail(ErrorKind::kBadInput,
         "KEV_THREADS={}: not a thread count (a whole number from 1 to {}; unset, one per CPU)",
         std::string(v).substr(0, 40), kMaxThreads);
}

namespace {

// One job at a time: items are claimed from a shared counter by the caller and by as many
// pool threads as the job asked for. The first exception stops further claims.
struct Job {
  const std::function<void(size_t)>* fn = nullptr;
  size_t n = 0;
  size_t helpers = 0;  // pool threads that may join
  std::atomic<size_t> next{0};
  std::atomic<bool> stop{false};
  std::exception_ptr error;
  std::mutex error_mutex;

  void work() {
    while (!stop) {
      size_t i = next++;
      if (i >= n) return;
      try {
        (*fn)(i);
      } catch (...) {
        std::lock_guard lock(error_mutex);
        if (!error) error = std::current_exception();
        stop = true;
      }
    }
  }
};

thread_local bool t_in_pool_job = false;

// Persistent worker threads (started on first use, never joined: they sleep between jobs).
// Starting threads per call costs ~20 us each, which dominates small GEMMs and head batches.
class Pool {
 public:
  static Pool& instance() {
    static Pool* pool = new Pool();  // leaked on purpose: no shutdown order problems at exit
    return *pool;
  }

  // Runs the job on the caller plus up to job.helpers pool threads; false if the pool is busy
  // with another caller's job (the caller then runs it alone).
  bool run(Job& job) {
    std::unique_lock busy(busy_, std::try_to_lock);
    if (!busy.owns_lock()) return false;
    grow(job.helpers);
    {
      std::lock_guard lock(mutex_);
      job_ = &job;
      joined_ = 0;
      finished_ = 0;
      ++generation_;
    }
    wake_.notify_all();
    t_in_pool_job = true;
    job.work();
    t_in_pool_job = false;
    std::unique_lock lock(mutex_);
    job_ = nullptr;  // no late joiners
    done_.wait(lock, [&] { return finished_ == joined_; });
    return true;
  }

 private:
  void grow(size_t wanted) {
    std::lock_guard lock(mutex_);
    while (threads_ < wanted) {
      std::thread([this] { loop(); }).detach();
      ++threads_;
    }
  }

  void loop() {
    t_in_pool_job = true;  // nested parallel_for inside a job runs inline
    uint64_t seen = 0;
    std::unique_lock lock(mutex_);
    for (;;) {
      wake_.wait(lock, [&] { return generation_ != seen; });
      seen = generation_;
      Job* job = job_;
      if (!job || joined_ >= job->helpers) continue;
      ++joined_;
      lock.unlock();
      job->work();
      lock.lock();
      ++finished_;
      done_.notify_all();
    }
  }

  std::mutex busy_;
  std::mutex mutex_;
  std::condition_variable wake_, done_;
  Job* job_ = nullptr;
  uint64_t generation_ = 0;
  size_t joined_ = 0, finished_ = 0, threads_ = 0;
};

}  // namespace

void parallel_for(size_t n, const std::function<void(size_t)>& fn, size_t workers) {
  if (workers == 0) workers = default_workers();
  if (workers > n) workers = n;
  Job job;
  job.fn = &fn;
  job.n = n;
  job.helpers = workers > 1 ? workers - 1 : 0;
  if (job.helpers == 0 || t_in_pool_job || !Pool::instance().run(job)) job.work();
  if (job.error) std::rethrow_exception(job.error);
}

}  // namespace kev
