#include "kev/core/progress.h"

#include <unistd.h>

#include <cstdio>

namespace kev {
namespace {
std::atomic<bool> g_quiet{false};
}

void Progress::set_quiet(bool quiet) {
  g_quiet = quiet;
}

Progress::Progress(std::string label, uint64_t total_bytes, uint64_t total_items)
    : label_(std::move(label)), total_bytes_(total_bytes), total_items_(total_items) {
  enabled_ = !g_quiet && ::isatty(STDERR_FILENO);
}

Progress::~Progress() {
  if (enabled_ && drawn_) draw(true);
}

void Progress::advance(uint64_t bytes, uint64_t items) {
  bytes_ += bytes;
  items_ += items;
  if (!enabled_) return;
  std::lock_guard lock(mutex_);
  auto now = std::chrono::steady_clock::now();
  if (now - last_draw_ < std::chrono::milliseconds(100)) return;
  last_draw_ = now;
  draw(false);
}

void Progress::draw(bool final_line) {
  std::fprintf(stderr, "\r%s: %.2f/%.2f GB, %llu/%llu tensors%s", label_.c_str(),
               double(bytes_.load()) / 1e9, double(total_bytes_) / 1e9,
               static_cast<unsigned long long>(items_.load()),
               static_cast<unsigned long long>(total_items_), final_line ? "\n" : "");
  std::fflush(stderr);
  drawn_ = true;
}

}  // namespace kev
