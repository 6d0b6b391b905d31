// 64-byte aligned blocks (aligned.h): small ones from the heap, large ones mapped.
#include "kev/core/aligned.h"

#include <sys/mman.h>

#include <cstring>

namespace kev {

namespace {
constexpr std::align_val_t kAlign{64};
}

void* allocate_aligned_block(size_t bytes) {
  if (bytes < kMappedBlockBytes) return ::operator new(bytes, kAlign);
  void* p = ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED) throw std::bad_alloc();
  return p;  // page-aligned
}

void* allocate_zeroed_block(size_t bytes) {
  void* p = allocate_aligned_block(bytes);
  if (bytes < kMappedBlockBytes) std::memset(p, 0, bytes);  // a mapped block is zero already
  return p;
}

void free_aligned_block(void* p, size_t bytes) noexcept {
  if (p == nullptr) return;
  if (bytes < kMappedBlockBytes) return ::operator delete(p, kAlign);
  ::munmap(p, bytes);
}

}  // namespace kev
