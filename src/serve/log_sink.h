// LogSink: stderr lines written by a thread of their own, so that a stderr nobody reads (a pipe
// whose reader never reads: full after 64 KiB, ~1,700 request lines) never blocks the caller: it
// did block the I/O thread, and the whole server stalled, SIGTERM included.
//
// Bounds: at most kLogQueueBytes (1 MiB) wait; beyond, lines are dropped and counted, and the
// count is written once stderr takes lines again. Thread-safe: line() from any thread, never
// blocks on stderr. stop() writes what is queued for at most `grace`, then ends the thread.
#pragma once
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <deque>
#include <limits>
#include <mutex>
#include <string>
#include <string_view>
#include <thread>

namespace kev {

class LogSink {
 public:
  using Clock = std::chrono::steady_clock;

  LogSink() : thread_([this] { run(); }) {}
  ~LogSink() { stop(); }
  LogSink(const LogSink&) = delete;
  LogSink& operator=(const LogSink&) = delete;

  // Queues one line (a newline is added).
  void line(std::string text);
  // Writes what is queued, for at most `grace` if stderr does not take it, then ends the thread.
  void stop(Clock::duration grace = std::chrono::seconds(1));

 private:
  static constexpr size_t kLogQueueBytes = 1 << 20;
  static constexpr Clock::rep kNever = std::numeric_limits<Clock::rep>::max();

  void run();
  bool past_grace() const { return Clock::now().time_since_epoch().count() >= give_up_at_.load(); }
  // false: stderr failed, or stayed full past the grace time at exit (the text is dropped).
  bool write_all(std::string_view text);

  std::mutex mutex_;
  std::condition_variable cv_;
  std::deque<std::string> lines_;
  size_t queued_ = 0, dropped_ = 0;
  bool stopping_ = false, stopped_ = false;
  std::atomic<Clock::rep> give_up_at_{kNever};
  std::thread thread_;  // last: started once the members above exist
};

}  // namespace kev
