// Buffers that start on a 64-byte boundary (a cache line, an AVX-512 vector), for the arrays the
// vector kernels stream through: a row of floats whose stride is a multiple of 64 bytes then
// never straddles cache lines. AlignedVector<T> is std::vector<T> with that allocator (the same
// interface; a different type). Thread safety: as std::vector.
#pragma once
#include <cstddef>
#include <new>
#include <vector>

namespace kev {

template <class T>
struct CacheAligned {
  using value_type = T;
  static constexpr std::align_val_t kAlign{64};
  CacheAligned() = default;
  template <class U>
  CacheAligned(const CacheAligned<U>&) noexcept {}  // NOLINT: rebinding is implicit
  T* allocate(size_t n) { return static_cast<T*>(::operator new(n * sizeof(T), kAlign)); }
  void deallocate(T* p, size_t) noexcept { ::operator delete(p, kAlign); }
  friend bool operator==(const CacheAligned&, const CacheAligned&) { return true; }
};

template <class T>
using AlignedVector = std::vector<T, CacheAligned<T>>;

}  // namespace kev
