// Admission (kev/serve/admission.h) driven directly with a fake runner: FIFO order, batch
// formation, tasks taken alone, the queue bound, deadline expiry while a worker is busy,
// exceptions in the runner (logged through the log given to start()), delivery of each result
// to its task after the bookkeeping, and drain on stop().
#include "kev/serve/admission.h"

#include <gtest/gtest.h>

#include <chrono>
#include <condition_variable>
#include <limits>
#include <memory>
#include <mutex>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

namespace kev {
namespace {

using namespace std::chrono_literals;

class FakeRunner;

// A task whose result is an int; the runner tells it where to deliver (FakeRunner::delivered).
struct FakeTask : AdmissionTask {
  explicit FakeTask(int i, bool a = false, bool b = false) : id(i) {
    alone = a;
    backlogged = b;
  }
  using Result = int;
  void deliver(int result);
  int id;
  FakeRunner* runner = nullptr;
};

using TestAdmission = Admission<FakeTask>;

// A runner that records every batch (task ids, in order) and can hold the worker inside a batch
// until released, so that the test decides what is queued when the worker next looks.
class FakeRunner {
 public:
  TestAdmission::Runner runner() {
    return [this](const std::vector<std::shared_ptr<FakeTask>>& tasks) {
      std::vector<int> ids;
      for (const auto& t : tasks) ids.push_back(t->id);
      std::unique_lock lock(mutex_);
      const size_t k = entered_++;
      batches_.push_back(ids);
      cv_.notify_all();
      cv_.wait(lock, [&] { return allowed_ > k; });
      if (throw_next_) {
        throw_next_ = false;
        throw std::runtime_error("fake runner failure");
      }
      if (short_next_) {
        short_next_ = false;
        return std::vector<int>{};
      }
      std::vector<int> results;
      for (const auto& t : tasks) {
        t->runner = this;
        results.push_back(t->id + kResultOffset);
      }
      return results;
    };
  }
  // On a worker, from Admission: `task` got `result`. Recorded as the task's id when the result
  // is the one the runner made for that task (else -1), with what was in flight then.
  void delivered(const FakeTask& task, int result) {
    const size_t inflight = admission_ ? admission_->counts().first : 0;
    std::lock_guard lock(mutex_);
    sent_.push_back(result == task.id + kResultOffset ? task.id : -1);
    inflight_at_delivery_.push_back(inflight);
    cv_.notify_all();
  }
  // Record Admission's in-flight count at each delivery.
  void watch(const TestAdmission& a) { admission_ = &a; }
  std::vector<size_t> inflight_at_delivery() {
    std::lock_guard lock(mutex_);
    return inflight_at_delivery_;
  }
  // Admission's log: the lines it was given.
  TestAdmission::Log log() {
    return [this](std::string line) {
      std::lock_guard lock(mutex_);
      logged_.push_back(std::move(line));
    };
  }
  std::vector<std::string> logged() {
    std::lock_guard lock(mutex_);
    return logged_;
  }
  // From now on each batch waits in the runner until released.
  void hold() {
    std::lock_guard lock(mutex_);
    allowed_ = entered_;
  }
  // Lets the oldest held batch finish.
  void release_one() {
    std::lock_guard lock(mutex_);
    ++allowed_;
    cv_.notify_all();
  }
  // Lets every batch finish, now and later.
  void release() {
    std::lock_guard lock(mutex_);
    allowed_ = std::numeric_limits<size_t>::max();
    cv_.notify_all();
  }
  void throw_next() {
    std::lock_guard lock(mutex_);
    throw_next_ = true;
  }
  // The next batch returns no result at all (a runner that breaks its contract).
  void short_next() {
    std::lock_guard lock(mutex_);
    short_next_ = true;
  }
  // Waits until `n` batches have entered the runner.
  bool wait_entered(size_t n) {
    std::unique_lock lock(mutex_);
    return cv_.wait_for(lock, 5s, [&] { return entered_ >= n; });
  }
  bool wait_sent(size_t n) {
    std::unique_lock lock(mutex_);
    return cv_.wait_for(lock, 5s, [&] { return sent_.size() >= n; });
  }
  std::vector<std::vector<int>> batches() {
    std::lock_guard lock(mutex_);
    return batches_;
  }
  std::vector<int> sent() {
    std::lock_guard lock(mutex_);
    return sent_;
  }

 private:
  std::mutex mutex_;
  std::condition_variable cv_;
  static constexpr int kResultOffset = 1000;
  bool throw_next_ = false, short_next_ = false;
  const TestAdmission* admission_ = nullptr;
  std::vector<size_t> inflight_at_delivery_;
  size_t entered_ = 0;
  size_t allowed_ = std::numeric_limits<size_t>::max();  // batches that may finish
  std::vector<std::vector<int>> batches_;
  std::vector<int> sent_;
  std::vector<std::string> logged_;
};

void FakeTask::deliver(int result) {
  runner->delivered(*this, result);
}

// Counts expirations (and, apart, displacements), thread-safely.
struct Expired {
  std::mutex mutex;
  std::condition_variable cv;
  std::vector<int> ids, displaced;
  TestAdmission::Refuse of(int id) {
    return [this, id](TestAdmission::Refusal why) {
      std::lock_guard lock(mutex);
      (why == TestAdmission::Refusal::kExpired ? ids : displaced).push_back(id);
      cv.notify_all();
    };
  }
  bool wait(size_t n) {
    std::unique_lock lock(mutex);
    return cv.wait_for(lock, 5s, [&] { return ids.size() >= n; });
  }
  std::vector<int> get() {
    std::lock_guard lock(mutex);
    return ids;
  }
};

TEST(Admission, OneAtATimeInFifoOrder) {
  FakeRunner fake;
  Expired expired;
  TestAdmission a(/*max_inflight=*/1, /*max_queue=*/16, /*max_batch=*/1, 10s);
  a.start(fake.runner(), fake.log());
  fake.hold();
  ASSERT_TRUE(a.submit(std::make_shared<FakeTask>(0), expired.of(0)));
  ASSERT_TRUE(fake.wait_entered(1));
  for (int i = 1; i <= 5; ++i) ASSERT_TRUE(a.submit(std::make_shared<FakeTask>(i), expired.of(i)));
  EXPECT_EQ(a.counts(), (std::pair<size_t, size_t>{1, 5}));
  fake.release();
  ASSERT_TRUE(fake.wait_sent(6));
  a.stop();
  EXPECT_EQ(fake.batches(), (std::vector<std::vector<int>>{{0}, {1}, {2}, {3}, {4}, {5}}));
  EXPECT_EQ(fake.sent(), (std::vector<int>{0, 1, 2, 3, 4, 5}));
  EXPECT_TRUE(expired.get().empty());
}

TEST(Admission, AFreeWorkerTakesUpToMaxBatchFromTheFront) {
  FakeRunner fake;
  Expired expired;
  TestAdmission a(1, 16, /*max_batch=*/3, 10s);
  a.start(fake.runner(), fake.log());
  fake.hold();
  ASSERT_TRUE(a.submit(std::make_shared<FakeTask>(0), expired.of(0)));
  ASSERT_TRUE(fake.wait_entered(1));  // the worker took 0 alone: nothing else was queued
  for (int i = 1; i <= 7; ++i) ASSERT_TRUE(a.submit(std::make_shared<FakeTask>(i), expired.of(i)));
  fake.release();
  ASSERT_TRUE(fake.wait_sent(8));
  a.stop();
  EXPECT_EQ(fake.batches(), (std::vector<std::vector<int>>{{0}, {1, 2, 3}, {4, 5, 6}, {7}}));
}

TEST(Admission, CountsEveryRequestOfABatchInFlight) {
  FakeRunner fake;
  Expired expired;
  TestAdmission a(1, 16, 4, 10s);
  a.start(fake.runner(), fake.log());
  fake.hold();
  ASSERT_TRUE(a.submit(std::make_shared<FakeTask>(0), expired.of(0)));
  ASSERT_TRUE(fake.wait_entered(1));
  for (int i = 1; i <= 5; ++i) ASSERT_TRUE(a.submit(std::make_shared<FakeTask>(i), expired.of(i)));
  EXPECT_EQ(a.counts(), (std::pair<size_t, size_t>{1, 5}));
  fake.release_one();  // batch {0} ends; the worker takes {1, 2, 3, 4} and is held in it
  ASSERT_TRUE(fake.wait_entered(2));
  EXPECT_EQ(a.counts(), (std::pair<size_t, size_t>{4, 1}));
  fake.release();
  ASSERT_TRUE(fake.wait_sent(6));
  a.stop();
  EXPECT_EQ(a.counts(), (std::pair<size_t, size_t>{0, 0}));
}

TEST(Admission, AnAloneTaskGetsABatchOfItsOwn) {
  FakeRunner fake;
  Expired expired;
  TestAdmission a(1, 16, 8, 10s);
  a.start(fake.runner(), fake.log());
  fake.hold();
  ASSERT_TRUE(a.submit(std::make_shared<FakeTask>(0), expired.of(0)));
  ASSERT_TRUE(fake.wait_entered(1));
  ASSERT_TRUE(a.submit(std::make_shared<FakeTask>(1), expired.of(1)));
  ASSERT_TRUE(a.submit(std::make_shared<FakeTask>(2, /*alone=*/true), expired.of(2)));
  ASSERT_TRUE(a.submit(std::make_shared<FakeTask>(3), expired.of(3)));
  ASSERT_TRUE(a.submit(std::make_shared<FakeTask>(4, /*alone=*/true), expired.of(4)));
  ASSERT_TRUE(a.submit(std::make_shared<FakeTask>(5, /*alone=*/true), expired.of(5)));
  ASSERT_TRUE(a.submit(std::make_shared<FakeTask>(6), expired.of(6)));
  ASSERT_TRUE(a.submit(std::make_shared<FakeTask>(7), expired.of(7)));
  fake.release();
  ASSERT_TRUE(fake.wait_sent(8));
  a.stop();
  EXPECT_EQ(fake.batches(), (std::vector<std::vector<int>>{{0}, {1}, {2}, {3}, {4}, {5}, {6, 7}}));
}

TEST(Admission, RefusesBeyondBusyWorkersPlusMaxQueue) {
  FakeRunner fake;
  Expired expired;
  TestAdmission a(/*max_inflight=*/2, /*max_queue=*/2, 1, 10s);
  a.start(fake.runner(), fake.log());
  fake.hold();
  ASSERT_TRUE(a.submit(std::make_shared<FakeTask>(0), expired.of(0)));
  ASSERT_TRUE(a.submit(std::make_shared<FakeTask>(1), expired.of(1)));
  ASSERT_TRUE(fake.wait_entered(2));  // both workers busy
  EXPECT_TRUE(a.submit(std::make_shared<FakeTask>(2), expired.of(2)));
  EXPECT_TRUE(a.submit(std::make_shared<FakeTask>(3), expired.of(3)));
  EXPECT_FALSE(a.submit(std::make_shared<FakeTask>(4), expired.of(4)));
  EXPECT_EQ(a.counts(), (std::pair<size_t, size_t>{2, 2}));
  fake.release();
  ASSERT_TRUE(fake.wait_sent(4));
  a.stop();
  EXPECT_TRUE(expired.get().empty());
  for (const auto& b : fake.batches()) EXPECT_NE(b, std::vector<int>{4});
}

TEST(Admission, AQueuedTaskPastItsDeadlineExpiresWhileTheWorkerIsBusy) {
  FakeRunner fake;
  Expired expired;
  TestAdmission a(1, 16, 8, /*wait=*/50ms);
  a.start(fake.runner(), fake.log());
  fake.hold();
  ASSERT_TRUE(a.submit(std::make_shared<FakeTask>(0), expired.of(0)));
  ASSERT_TRUE(fake.wait_entered(1));
  ASSERT_TRUE(a.submit(std::make_shared<FakeTask>(1), expired.of(1)));
  ASSERT_TRUE(a.submit(std::make_shared<FakeTask>(2), expired.of(2)));
  // The worker is still held in batch {0}: the sweeper expires both at their deadline.
  ASSERT_TRUE(expired.wait(2));
  EXPECT_EQ(expired.get(), (std::vector<int>{1, 2}));
  EXPECT_EQ(a.counts(), (std::pair<size_t, size_t>{1, 0}));
  fake.release();
  ASSERT_TRUE(fake.wait_sent(1));
  // A task submitted now is well within its deadline and is scored.
  ASSERT_TRUE(a.submit(std::make_shared<FakeTask>(3), expired.of(3)));
  ASSERT_TRUE(fake.wait_sent(2));
  a.stop();
  EXPECT_EQ(fake.batches(), (std::vector<std::vector<int>>{{0}, {3}}));
  EXPECT_EQ(expired.get(), (std::vector<int>{1, 2}));
}

// A runner that breaks (`arm` makes its next batch throw, or return the wrong number of
// results) costs that batch, logged as `line`, and not the worker: the next batch is delivered.
void expect_batch_lost(void (FakeRunner::*arm)(), const std::string& line) {
  FakeRunner fake;
  Expired expired;
  TestAdmission a(1, 16, 1, 10s);
  a.start(fake.runner(), fake.log());
  (fake.*arm)();
  ASSERT_TRUE(a.submit(std::make_shared<FakeTask>(0), expired.of(0)));
  ASSERT_TRUE(fake.wait_entered(1));
  ASSERT_TRUE(a.submit(std::make_shared<FakeTask>(1), expired.of(1)));
  ASSERT_TRUE(fake.wait_sent(1));
  a.stop();
  EXPECT_EQ(fake.sent(), std::vector<int>{1});  // nothing delivered for batch {0}
  EXPECT_EQ(a.counts(), (std::pair<size_t, size_t>{0, 0}));
  EXPECT_EQ(fake.logged(), std::vector<std::string>{line});
}

TEST(Admission, ARunnerThatThrowsCostsItsBatchNotTheWorker) {
  expect_batch_lost(&FakeRunner::throw_next,
                    "kev serve: internal error while scoring a batch: fake runner failure");
}

TEST(Admission, ARunnerReturningTheWrongCountIsLoggedAndDeliversNothing) {
  expect_batch_lost(&FakeRunner::short_next,
                    "kev serve: internal error while scoring a batch: the runner returned 0 "
                    "results for 1 tasks");
}

// Each task gets the result made for it, in batch order, once its batch no longer counts in
// flight (a client that sends its next request on seeing its reply finds the slot free).
TEST(Admission, DeliversEachResultToItsTaskOnceTheBatchLeftFlight) {
  FakeRunner fake;
  Expired expired;
  TestAdmission a(1, 16, 4, 10s);
  fake.watch(a);
  a.start(fake.runner(), fake.log());
  fake.hold();
  ASSERT_TRUE(a.submit(std::make_shared<FakeTask>(0), expired.of(0)));
  ASSERT_TRUE(fake.wait_entered(1));
  for (int i = 1; i <= 3; ++i) ASSERT_TRUE(a.submit(std::make_shared<FakeTask>(i), expired.of(i)));
  fake.release();
  ASSERT_TRUE(fake.wait_sent(4));
  a.stop();
  EXPECT_EQ(fake.batches(), (std::vector<std::vector<int>>{{0}, {1, 2, 3}}));
  EXPECT_EQ(fake.sent(), (std::vector<int>{0, 1, 2, 3}));
  EXPECT_EQ(fake.inflight_at_delivery(), (std::vector<size_t>{0, 0, 0, 0}));
}

TEST(Admission, StopDrainsEveryQueuedTaskThenJoins) {
  FakeRunner fake;
  Expired expired;
  TestAdmission a(1, 16, 2, 10s);
  a.start(fake.runner(), fake.log());
  fake.hold();
  ASSERT_TRUE(a.submit(std::make_shared<FakeTask>(0), expired.of(0)));
  ASSERT_TRUE(fake.wait_entered(1));
  for (int i = 1; i <= 4; ++i) ASSERT_TRUE(a.submit(std::make_shared<FakeTask>(i), expired.of(i)));
  std::thread releaser([&] {
    std::this_thread::sleep_for(20ms);
    fake.release();
  });
  a.stop();  // returns only once every queued task has been run and sent
  releaser.join();
  EXPECT_EQ(fake.sent(), (std::vector<int>{0, 1, 2, 3, 4}));
  EXPECT_EQ(fake.batches(), (std::vector<std::vector<int>>{{0}, {1, 2}, {3, 4}}));
  EXPECT_TRUE(expired.get().empty());
  a.stop();  // idempotent
}

// Fairness: a backlogged task (its client has unread replies) waits behind every fresh task,
// is scored one per batch, and gives its place to a fresh task when the queue is full.
TEST(Admission, FreshTasksGoFirstAndBackloggedOnesRunAlone) {
  FakeRunner fake;
  Expired expired;
  TestAdmission a(/*max_inflight=*/1, /*max_queue=*/16, /*max_batch=*/8, 10s);
  a.start(fake.runner(), fake.log());
  fake.hold();
  ASSERT_TRUE(a.submit(std::make_shared<FakeTask>(0), expired.of(0)));
  ASSERT_TRUE(fake.wait_entered(1));
  for (int i = 1; i <= 3; ++i)
    ASSERT_TRUE(a.submit(std::make_shared<FakeTask>(i, false, /*backlogged=*/true), expired.of(i)));
  ASSERT_TRUE(a.submit(std::make_shared<FakeTask>(4), expired.of(4)));
  ASSERT_TRUE(a.submit(std::make_shared<FakeTask>(5), expired.of(5)));
  fake.release();
  ASSERT_TRUE(fake.wait_sent(6));
  a.stop();
  EXPECT_EQ(fake.batches(), (std::vector<std::vector<int>>{{0}, {4, 5}, {1}, {2}, {3}}));
  EXPECT_TRUE(expired.get().empty());
}

TEST(Admission, AFreshTaskDisplacesTheNewestBackloggedOneWhenFull) {
  FakeRunner fake;
  Expired expired;
  TestAdmission a(/*max_inflight=*/1, /*max_queue=*/2, /*max_batch=*/8, 10s);
  a.start(fake.runner(), fake.log());
  fake.hold();
  ASSERT_TRUE(a.submit(std::make_shared<FakeTask>(0), expired.of(0)));
  ASSERT_TRUE(fake.wait_entered(1));
  ASSERT_TRUE(a.submit(std::make_shared<FakeTask>(1, false, true), expired.of(1)));
  ASSERT_TRUE(a.submit(std::make_shared<FakeTask>(2, false, true), expired.of(2)));
  // Full: another backlogged task is refused; a fresh one takes the newest backlogged place.
  EXPECT_FALSE(a.submit(std::make_shared<FakeTask>(3, false, true), expired.of(3)));
  EXPECT_TRUE(a.submit(std::make_shared<FakeTask>(4), expired.of(4)));
  EXPECT_TRUE(a.submit(std::make_shared<FakeTask>(5), expired.of(5)));
  // Both backlogged places were given up; now the queue holds fresh tasks only: full.
  EXPECT_FALSE(a.submit(std::make_shared<FakeTask>(6), expired.of(6)));
  {
    std::lock_guard lock(expired.mutex);
    EXPECT_EQ(expired.displaced, (std::vector<int>{2, 1}));
  }
  EXPECT_EQ(a.counts(), (std::pair<size_t, size_t>{1, 2}));
  fake.release();
  ASSERT_TRUE(fake.wait_sent(3));
  a.stop();
  EXPECT_EQ(fake.batches(), (std::vector<std::vector<int>>{{0}, {4, 5}}));
  EXPECT_TRUE(expired.get().empty());
}

TEST(Admission, BackloggedTasksExpireAtTheirDeadline) {
  FakeRunner fake;
  Expired expired;
  TestAdmission a(1, 16, 8, /*wait=*/50ms);
  a.start(fake.runner(), fake.log());
  fake.hold();
  ASSERT_TRUE(a.submit(std::make_shared<FakeTask>(0), expired.of(0)));
  ASSERT_TRUE(fake.wait_entered(1));
  ASSERT_TRUE(a.submit(std::make_shared<FakeTask>(1, false, true), expired.of(1)));
  ASSERT_TRUE(a.submit(std::make_shared<FakeTask>(2), expired.of(2)));
  ASSERT_TRUE(expired.wait(2));
  EXPECT_EQ(expired.get(), (std::vector<int>{1, 2}));
  fake.release();
  a.stop();
  EXPECT_EQ(fake.batches(), (std::vector<std::vector<int>>{{0}}));
}

}  // namespace
}  // namespace kev
