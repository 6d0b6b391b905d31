// The export's shard writer (private to the export layer): spans written to one
// SafetensorsWriter on a thread of its own, in submission order, so hashing and write() overlap
// with merging. A span either borrows one of a few chunk buffers (returned when written) or
// points into an input mapping (whose pages are released once written), so the export's memory
// stays a few chunks whatever the model's size. A write error is rethrown by the next acquire(),
// submit() or drain(). The SafetensorsWriter must outlive this object; the destructor stops and
// joins the thread. With one worker (KEV_THREADS=1) no thread starts and submit() writes in
// place (the same bytes in the same order).
#pragma once
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <exception>
#include <mutex>
#include <thread>
#include <vector>

#include "kev/core/file.h"
#include "kev/formats/safetensors.h"

namespace kev {

// Bytes of a chunk buffer, and the most an export streams in one piece.
inline constexpr size_t kExportChunkBytes = size_t{8} << 20;

class AsyncWriter {
 public:
  struct Span {
    const uint8_t* data = nullptr;
    size_t size = 0;
    int buffer = -1;                           // the chunk buffer it borrows, or -1
    const MappedFile* release_from = nullptr;  // the mapping it points into, or null
  };

  explicit AsyncWriter(SafetensorsWriter& out);
  ~AsyncWriter();
  AsyncWriter(const AsyncWriter&) = delete;
  AsyncWriter& operator=(const AsyncWriter&) = delete;

  // Blocks until a chunk buffer is free; returns its id and sets *data to it.
  int acquire(uint8_t** data);
  // Queues a span (at most a few wait; then it blocks).
  void submit(Span s);
  // Blocks until every queued span is written.
  void drain();

 private:
  void rethrow_locked();
  void write(const Span& s);
  void loop();

  SafetensorsWriter& out_;
  std::vector<std::vector<uint8_t>> buffers_;
  std::deque<int> free_;
  std::deque<Span> queue_;
  std::mutex mutex_;
  std::condition_variable cv_;
  std::exception_ptr error_;
  bool stop_ = false, busy_ = false;
  const bool inline_;
  std::thread thread_;
};

}  // namespace kev
