// Admission (kev/serve/admission.h): the FIFO queue, its workers and its deadline sweeper.
#include "kev/serve/admission.h"

#include <malloc.h>

#include <cstdio>
#include <exception>

namespace kev {
namespace {

using Clock = Admission::Clock;

// Bodies in one batch after which the freed memory is returned to the system (see work()).
constexpr size_t kTrimAfterBytes = 1 << 20;

// Runs f on a worker or the sweeper; an exception (only out of memory can get here: the runner
// turns every scoring error into a reply) is logged instead of ending the thread.
template <class F>
void guarded(const char* what, F&& f) {
  try {
    f();
  } catch (const std::exception& e) {
    std::fprintf(stderr, "kev serve: internal error while %s: %s\n", what, e.what());
  } catch (...) {
    std::fprintf(stderr, "kev serve: internal error while %s\n", what);
  }
}

}  // namespace

void Admission::start(Runner runner) {
  runner_ = std::move(runner);
  for (size_t i = 0; i < max_inflight_; ++i) threads_.emplace_back([this] { work(); });
  threads_.emplace_back([this] { sweep(); });
}

bool Admission::submit(std::shared_ptr<AdmissionTask> task, std::function<void()> expire) {
  {
    std::lock_guard lock(mutex_);
    if (busy_ + queue_.size() >= max_inflight_ + max_queue_) return false;
    queue_.push_back(Job{Clock::now() + wait_, std::move(task), std::move(expire)});
  }
  work_cv_.notify_one();
  sweep_cv_.notify_one();
  return true;
}

std::pair<size_t, size_t> Admission::counts() const {
  std::lock_guard lock(mutex_);
  return {inflight_, queue_.size()};
}

void Admission::stop() {
  {
    std::lock_guard lock(mutex_);
    stopping_ = true;
  }
  work_cv_.notify_all();
  sweep_cv_.notify_all();
  for (auto& t : threads_) t.join();
  threads_.clear();
}

void Admission::work() {
  std::unique_lock lock(mutex_);
  for (;;) {
    work_cv_.wait(lock, [&] { return stopping_ || !queue_.empty(); });
    if (queue_.empty()) return;
    // The oldest jobs, up to max_batch not yet expired; expired ones met on the way get 503.
    std::vector<std::shared_ptr<AdmissionTask>> batch;
    std::vector<std::function<void()>> expired;
    const auto now = Clock::now();
    // A task marked alone (the server's permute and separate, which run several passes of
    // their own) is taken in a batch of its own: the tasks behind it stay queued, under their
    // own deadlines, instead of waiting inside its batch.
    while (!queue_.empty() && batch.size() < max_batch_) {
      Job& job = queue_.front();
      if (now > job.deadline) {
        expired.push_back(std::move(job.expire));
        queue_.pop_front();
        continue;
      }
      const bool alone = job.task->alone;
      if (!batch.empty() && (alone || batch.front()->alone)) break;
      batch.push_back(std::move(job.task));
      queue_.pop_front();
      if (alone) break;
    }
    const size_t n = batch.size();
    size_t body_bytes = 0;
    for (const auto& t : batch) body_bytes += t->body_bytes;
    inflight_ += n;
    ++busy_;
    lock.unlock();
    for (auto& e : expired) guarded("expiring a queued request", e);
    expired.clear();
    std::vector<std::function<void()>> then;
    if (n > 0) guarded("scoring a batch", [&] { then = runner_(batch); });
    batch.clear();
    lock.lock();
    inflight_ -= n;
    --busy_;
    lock.unlock();
    for (auto& t : then) guarded("sending a reply", t);
    then.clear();
    // A big body (and its tokens) leaves freed pages in this thread's and the I/O thread's
    // malloc arenas; glibc keeps them, so RSS would stay at its high-water mark (347 MiB
    // after bursts of 4 MiB bodies, against 13 once they are returned).
    if (body_bytes >= kTrimAfterBytes) malloc_trim(0);
    lock.lock();
  }
}

void Admission::sweep() {
  std::unique_lock lock(mutex_);
  while (!stopping_) {
    if (queue_.empty()) {
      sweep_cv_.wait(lock);
      continue;
    }
    if (Clock::now() <= queue_.front().deadline) {
      sweep_cv_.wait_until(lock, queue_.front().deadline);
      continue;
    }
    Job job = std::move(queue_.front());
    queue_.pop_front();
    lock.unlock();
    guarded("expiring a queued request", job.expire);
    job = {};
    lock.lock();
  }
}

}  // namespace kev
