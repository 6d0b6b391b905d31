// Progress on stderr for long work: "label: 3.2/9.1 GB, 120/512 tensors". Silent when quiet
// was requested or stderr is not a terminal. Thread-safe; redraws at most 10 times a second.
#pragma once
#include <atomic>
#include <chrono>
#include <cstdint>
#include <mutex>
#include <string>

namespace kev {

class Progress {
 public:
  Progress(std::string label, uint64_t total_bytes, uint64_t total_items);
  ~Progress();  // finishes the line if anything was drawn
  void advance(uint64_t bytes, uint64_t items);
  static void set_quiet(bool quiet);  // process-wide, from --quiet

 private:
  void draw(bool final_line);
  std::string label_;
  uint64_t total_bytes_, total_items_;
  std::atomic<uint64_t> bytes_{0}, items_{0};
  std::mutex mutex_;
  std::chrono::steady_clock::time_point last_draw_{};
  bool enabled_ = false, drawn_ = false;
};

}  // namespace kev
