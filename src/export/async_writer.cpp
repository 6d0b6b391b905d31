// The export's shard writer (async_writer.h).
#include "export/async_writer.h"

#include "kev/core/threads.h"

namespace kev {
namespace {

constexpr int kChunkBuffers = 3;
constexpr size_t kMaxQueued = 4;

}  // namespace

AsyncWriter::AsyncWriter(SafetensorsWriter& out) : out_(out), inline_(default_workers() == 1) {
  for (int i = 0; i < kChunkBuffers; ++i) {
    buffers_.emplace_back(kExportChunkBytes);
    free_.push_back(i);
  }
  if (!inline_) thread_ = std::thread([this] { loop(); });
}

AsyncWriter::~AsyncWriter() {
  if (inline_) return;
  {
    std::lock_guard lock(mutex_);
    stop_ = true;
  }
  cv_.notify_all();
  thread_.join();
}

int AsyncWriter::acquire(uint8_t** data) {
  std::unique_lock lock(mutex_);
  cv_.wait(lock, [&] { return !free_.empty() || error_; });
  rethrow_locked();
  int id = free_.front();
  free_.pop_front();
  *data = buffers_[static_cast<size_t>(id)].data();
  return id;
}

void AsyncWriter::submit(Span s) {
  if (inline_) {
    write(s);
    if (s.buffer >= 0) free_.push_back(s.buffer);
    return;
  }
  std::unique_lock lock(mutex_);
  cv_.wait(lock, [&] { return queue_.size() < kMaxQueued || error_; });
  rethrow_locked();
  queue_.push_back(s);
  cv_.notify_all();
}

void AsyncWriter::drain() {
  std::unique_lock lock(mutex_);
  cv_.wait(lock, [&] { return (queue_.empty() && !busy_) || error_; });
  rethrow_locked();
}

void AsyncWriter::rethrow_locked() {
  if (error_) std::rethrow_exception(error_);
}

void AsyncWriter::write(const Span& s) {
  out_.write(s.data, s.size);
  if (s.release_from)
    s.release_from->release_pages(static_cast<size_t>(s.data - s.release_from->data()), s.size);
}

void AsyncWriter::loop() {
  for (;;) {
    Span s;
    {
      std::unique_lock lock(mutex_);
      cv_.wait(lock, [&] { return stop_ || !queue_.empty(); });
      if (stop_ || error_) return;
      s = queue_.front();
      queue_.pop_front();
      busy_ = true;
    }
    try {
      write(s);
    } catch (...) {
      std::lock_guard lock(mutex_);
      error_ = std::current_exception();
    }
    {
      std::lock_guard lock(mutex_);
      busy_ = false;
      if (s.buffer >= 0) free_.push_back(s.buffer);
    }
    cv_.notify_all();
  }
}

}  // namespace kev
