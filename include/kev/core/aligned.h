// Buffers that start on a 64-byte boundary (a cache line, an AVX-512 vector), for the arrays the
// vector kernels stream through: a row of floats whose stride is a multiple of 64 bytes then
// never straddles cache lines. AlignedVector<T> is std::vector<T> with that allocator (the same
// interface; a different type).
//
// Blocks of kMappedBlockBytes or more are mapped pages of their own, given back to the system
// when freed: a served request's scratch and keys/values do not stay in the process's heap once
// it is answered. Allocation failure throws std::bad_alloc.
// Thread safety: as std::vector; the block functions are reentrant.
#pragma once
#include <cstddef>
#include <new>
#include <vector>

namespace kev {

inline constexpr size_t kMappedBlockBytes = size_t{1} << 20;

void* allocate_aligned_block(size_t bytes);               // 64-byte aligned; never nullptr
void free_aligned_block(void* p, size_t bytes) noexcept;  // `bytes` as allocated

template <class T>
struct CacheAligned {
  using value_type = T;
  CacheAligned() = default;
  template <class U>
  CacheAligned(const CacheAligned<U>&) noexcept {}  // NOLINT: rebinding is implicit
  T* allocate(size_t n) { return static_cast<T*>(allocate_aligned_block(n * sizeof(T))); }
  void deallocate(T* p, size_t n) noexcept { free_aligned_block(p, n * sizeof(T)); }
  friend bool operator==(const CacheAligned&, const CacheAligned&) { return true; }
};

template <class T>
using AlignedVector = std::vector<T, CacheAligned<T>>;

}  // namespace kev
