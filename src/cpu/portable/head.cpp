// The portable pointer-head kernels: the shared body (src/cpu/bodies/head_kernels_body.inc) over a
// plain 16-float vector, the reference order of pointer_head.h.
#include <cmath>
#include <cstring>

#include "cpu/bodies/kernel_order.h"
#include "cpu/portable/portable.h"

namespace kev::head_kernels {

namespace portable {
#define KEV_HEAD_TARGET

struct V {
  float x[16];
};
inline V zero() {
  return V{};
}
inline V load(const float* p) {
  V v;
  std::memcpy(v.x, p, sizeof v.x);
  return v;
}
inline V load_part(const float* p, size_t n) {
  V v{};
  std::memcpy(v.x, p, n * sizeof(float));
  return v;
}
inline V bcast(float f) {
  V v;
  for (float& x : v.x) x = f;
  return v;
}
inline V fma(const V& a, const V& b, const V& c) {
  V r;
  for (int i = 0; i < 16; ++i) r.x[i] = std::fma(a.x[i], b.x[i], c.x[i]);
  return r;
}
inline void store(float* p, const V& v) {
  std::memcpy(p, v.x, sizeof v.x);
}
inline void store_part(float* p, const V& v, size_t n) {
  std::memcpy(p, v.x, n * sizeof(float));
}
inline float reduce(const V& a) {
  return tree16(a.x);
}
constexpr size_t kMaxNq = 4;
constexpr int kTileRows = 1;

#include "cpu/bodies/head_kernels_body.inc"
#undef KEV_HEAD_TARGET
}  // namespace portable

}  // namespace kev::head_kernels

namespace kev::portable {

const head_kernels::KernelSet& head() {
  return head_kernels::portable::kSet;
}

}  // namespace kev::portable
