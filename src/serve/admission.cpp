// AdmissionQueue (kev/serve/admission.h): the fresh and backlogged FIFOs, their workers and the
// deadline sweeper.
#include "kev/serve/admission.h"

#include <malloc.h>

#include <exception>
#include <stdexcept>
#include <string>

namespace kev {
namespace {

using Clock = AdmissionQueue::Clock;

// Bodies in one batch after which the freed memory is returned to the system (see work()).
constexpr size_t kTrimAfterBytes = 1 << 20;

}  // namespace

template <class F>
void AdmissionQueue::guarded(const char* what, F&& f) const {
  std::string line;
  try {
    f();
    return;
  } catch (const std::exception& e) {
    line = std::string("kev serve: internal error while ") + what + ": " + e.what();
  } catch (...) {
    line = std::string("kev serve: internal error while ") + what;
  }
  log_(std::move(line));
}

void AdmissionQueue::start(Runner runner, Log log) {
  if (!log) throw std::invalid_argument("AdmissionQueue::start needs a log");
  runner_ = std::move(runner);
  log_ = std::move(log);
  for (size_t i = 0; i < max_inflight_; ++i) threads_.emplace_back([this] { work(); });
  threads_.emplace_back([this] { sweep(); });
}

bool AdmissionQueue::submit(std::shared_ptr<AdmissionTask> task, Refuse refuse) {
  Job displaced;
  {
    std::lock_guard lock(mutex_);
    if (busy_ + queued() >= max_inflight_ + max_queue_) {
      // Full: a fresh task takes the place of the newest backlogged one (whose client still has
      // replies to read); a backlogged task, or a fresh one with none to displace, is refused.
      if (task->backlogged || backlog_.empty()) return false;
      displaced = std::move(backlog_.back());
      backlog_.pop_back();
    }
    (task->backlogged ? backlog_ : fresh_)
        .push_back(Job{Clock::now() + wait_, std::move(task), std::move(refuse)});
  }
  work_cv_.notify_one();
  sweep_cv_.notify_one();
  if (displaced.refuse) displaced.refuse(Refusal::kDisplaced);
  return true;
}

std::pair<size_t, size_t> AdmissionQueue::counts() const {
  std::lock_guard lock(mutex_);
  return {inflight_, queued()};
}

void AdmissionQueue::stop() {
  {
    std::lock_guard lock(mutex_);
    stopping_ = true;
  }
  work_cv_.notify_all();
  sweep_cv_.notify_all();
  for (auto& t : threads_) t.join();
  threads_.clear();
}

void AdmissionQueue::work() {
  std::unique_lock lock(mutex_);
  for (;;) {
    work_cv_.wait(lock, [&] { return stopping_ || queued() > 0; });
    if (queued() == 0) return;
    // The oldest fresh jobs, up to max_batch not yet expired, else the oldest backlogged job
    // alone; expired ones met on the way get their refusal.
    std::vector<std::shared_ptr<AdmissionTask>> batch;
    std::vector<Refuse> expired;
    const auto now = Clock::now();
    auto drop_expired = [&](std::deque<Job>& q) {
      while (!q.empty() && now > q.front().deadline) {
        expired.push_back(std::move(q.front().refuse));
        q.pop_front();
      }
    };
    drop_expired(fresh_);
    drop_expired(backlog_);
    std::deque<Job>& from = fresh_.empty() ? backlog_ : fresh_;
    const size_t most = &from == &fresh_ ? max_batch_ : 1;
    // A task marked alone (the server's permute and separate, which run several passes of
    // their own) is taken in a batch of its own: the tasks behind it stay queued, under their
    // own deadlines, instead of waiting inside its batch.
    while (!from.empty() && batch.size() < most) {
      Job& job = from.front();
      if (now > job.deadline) {
        expired.push_back(std::move(job.refuse));
        from.pop_front();
        continue;
      }
      const bool alone = job.task->alone;
      if (!batch.empty() && (alone || batch.front()->alone)) break;
      batch.push_back(std::move(job.task));
      from.pop_front();
      if (alone) break;
    }
    const size_t n = batch.size();
    size_t body_bytes = 0;
    for (const auto& t : batch) body_bytes += t->body_bytes;
    inflight_ += n;
    ++busy_;
    lock.unlock();
    for (auto& e : expired) guarded("expiring a queued request", [&] { e(Refusal::kExpired); });
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

void AdmissionQueue::sweep() {
  std::unique_lock lock(mutex_);
  while (!stopping_) {
    if (queued() == 0) {
      sweep_cv_.wait(lock);
      continue;
    }
    // Each FIFO is in deadline order: the next to expire is the front of one of them.
    std::deque<Job>* q = &fresh_;
    if (fresh_.empty() ||
        (!backlog_.empty() && backlog_.front().deadline < fresh_.front().deadline))
      q = &backlog_;
    if (Clock::now() <= q->front().deadline) {
      sweep_cv_.wait_until(lock, q->front().deadline);
      continue;
    }
    Job job = std::move(q->front());
    q->pop_front();
    lock.unlock();
    guarded("expiring a queued request", [&] { job.refuse(Refusal::kExpired); });
    job = {};
    lock.lock();
  }
}

}  // namespace kev
