// Buffers that start on a 64-byte boundary (a cache line, an AVX-512 vector), for the arrays the
// vector kernels stream through: a row of floats whose stride is a multiple of 64 bytes then
// never straddles cache lines. AlignedVector<T> is std::vector<T> with that allocator (the same
// interface; a different type).
//
// Blocks of kMappedBlockBytes or more are mapped pages of their own, given back to the system
// when freed: a served request's scratch and keys/values do not stay in the process's heap once
// it is answered. Allocation failure throws std::bad_alloc.
//
// ZeroedBuffer<T> is a move-only array of trivial T in such a block that starts zero: a mapped
// block as the system gives it (nothing writes it, so its pages are first touched by the threads
// that fill them, not by one thread's zero-fill pass beforehand, as AlignedVector<T>(n) does), a
// smaller one memset. For packed weights and scratch that parallel kernels fill;
// resize_for_overwrite keeps a block's old contents where it fits.
// Thread safety: as std::vector; the block functions are reentrant.
#pragma once
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <new>
#include <type_traits>
#include <utility>
#include <vector>

namespace kev {

inline constexpr size_t kMappedBlockBytes = size_t{1} << 20;

void* allocate_aligned_block(size_t bytes);               // 64-byte aligned; never nullptr
void free_aligned_block(void* p, size_t bytes) noexcept;  // `bytes` as allocated
// As allocate_aligned_block, every byte zero (a mapped block as the system gives it).
void* allocate_zeroed_block(size_t bytes);

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

template <class T>
class ZeroedBuffer {
  static_assert(std::is_trivial_v<T>, "ZeroedBuffer holds trivial types (all-zero bytes = 0)");

 public:
  ZeroedBuffer() = default;
  explicit ZeroedBuffer(size_t n)
      : p_(n ? static_cast<T*>(allocate_zeroed_block(bytes_of(n))) : nullptr), n_(n), cap_(n) {}
  ZeroedBuffer(ZeroedBuffer&& o) noexcept
      : p_(std::exchange(o.p_, nullptr)),
        n_(std::exchange(o.n_, 0)),
        cap_(std::exchange(o.cap_, 0)) {}
  ZeroedBuffer& operator=(ZeroedBuffer&& o) noexcept {  // frees the old block now; o is left empty
    ZeroedBuffer taken(std::move(o));
    std::swap(p_, taken.p_);
    std::swap(n_, taken.n_);
    std::swap(cap_, taken.cap_);
    return *this;
  }
  ZeroedBuffer(const ZeroedBuffer&) = delete;
  ZeroedBuffer& operator=(const ZeroedBuffer&) = delete;
  ~ZeroedBuffer() { free_aligned_block(p_, cap_ * sizeof(T)); }

  // n elements for scratch its user overwrites whole: the block is kept where it holds n (its
  // elements keep whatever they held), else replaced by a new zeroed one.
  void resize_for_overwrite(size_t n) {
    if (n > cap_) *this = ZeroedBuffer(n);
    n_ = n;
  }

  T* data() { return p_; }
  const T* data() const { return p_; }
  size_t size() const { return n_; }
  bool empty() const { return n_ == 0; }  // also what a move leaves behind
  T& operator[](size_t i) { return p_[i]; }
  const T& operator[](size_t i) const { return p_[i]; }
  friend bool operator==(const ZeroedBuffer& a, const ZeroedBuffer& b) {  // as std::vector's
    return a.n_ == b.n_ && std::equal(a.p_, a.p_ + a.n_, b.p_);
  }

 private:
  static size_t bytes_of(size_t n) {
    if (n > SIZE_MAX / sizeof(T)) throw std::bad_array_new_length();
    return n * sizeof(T);
  }

  T* p_ = nullptr;
  size_t n_ = 0, cap_ = 0;
};

}  // namespace kev
