// LogSink (log_sink.h): the server's stderr writer thread.
#include "serve/log_sink.h"

#include <poll.h>
#include <unistd.h>

#include <fmt/format.h>
#include <cerrno>
#include <utility>

namespace kev {

void LogSink::line(std::string text) {
  text += '\n';
  {
    std::lock_guard lock(mutex_);
    if (stopped_ || queued_ + text.size() > kLogQueueBytes) {
      ++dropped_;
      return;
    }
    queued_ += text.size();
    lines_.push_back(std::move(text));
  }
  cv_.notify_one();
}

void LogSink::stop(Clock::duration grace) {
  {
    std::lock_guard lock(mutex_);
    if (!stopping_) give_up_at_.store((Clock::now() + grace).time_since_epoch().count());
    stopping_ = true;
  }
  cv_.notify_one();
  if (thread_.joinable()) thread_.join();
}

void LogSink::run() {
  std::unique_lock lock(mutex_);
  for (;;) {
    cv_.wait(lock, [&] { return stopping_ || !lines_.empty(); });
    if (lines_.empty() && dropped_ == 0) break;
    std::deque<std::string> batch;
    batch.swap(lines_);
    queued_ = 0;
    const size_t dropped = std::exchange(dropped_, 0);
    lock.unlock();
    bool ok = true;
    if (dropped > 0)
      ok = write_all(
          fmt::format("kev serve: {} log lines dropped: stderr was not being read\n", dropped));
    for (const std::string& text : batch) ok = ok && write_all(text);
    lock.lock();
    if (!ok && stopping_ && past_grace()) break;  // stderr still blocked at exit: give up
  }
  stopped_ = true;
}

bool LogSink::write_all(std::string_view text) {
  while (!text.empty()) {
    pollfd p{STDERR_FILENO, POLLOUT, 0};
    const int ready = ::poll(&p, 1, 100);
    if (ready < 0 && errno != EINTR) return false;
    if (ready <= 0) {
      if (give_up_at_.load() != kNever && past_grace()) return false;
      continue;
    }
    if (p.revents & (POLLERR | POLLNVAL)) return false;
    // Writable: a pipe has at least a page free, and a line is shorter, so this does not block.
    const ssize_t n = ::write(STDERR_FILENO, text.data(), text.size());
    if (n < 0) {
      if (errno == EINTR || errno == EAGAIN) continue;
      return false;  // EPIPE (reader gone), EBADF: nobody will read it
    }
    text.remove_prefix(static_cast<size_t>(n));
  }
  return true;
}

}  // namespace kev
