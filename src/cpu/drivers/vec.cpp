// The vector kernels' dispatch (vec.h): the family folder's form of the level (arch::vec) where
// it has one, else the portable loops (portable/vec.cpp).
#include "kev/cpu/vec.h"

#include <vector>

#include "cpu/arch.h"
#include "kev/core/error.h"
#include "kev/cpu/model_kernels.h"

namespace kev::vec {

namespace {
const arch::VecVariant* variant_of(Isa isa) {
  if (!isa_supported(isa))
    fail(ErrorKind::kUnsupported, "this CPU cannot run the {} vector kernels", isa_name(isa));
  return arch::vec(isa);
}
}  // namespace

void dot_rows_isa(Isa isa, const float* a, const float* x, int64_t ld, int64_t rows, int64_t n,
                  float* out) {
  const arch::VecVariant* v = variant_of(isa);
  if (v != nullptr && v->dot_rows != nullptr && n % 16 == 0)
    return v->dot_rows(a, x, ld, rows, n, out);
  for (int64_t r = 0; r < rows; ++r) out[r] = dot_fused(a, x + r * ld, n);
}

void dot_rows(const float* a, const float* x, int64_t ld, int64_t rows, int64_t n, float* out) {
  dot_rows_isa(model_kernels().vec_isa(), a, x, ld, rows, n, out);
}

void dot_block_isa(Isa isa, const float* a, int64_t lda, int64_t na, const float* x, int64_t ldx,
                   int64_t nx, int64_t n, float* out, int64_t ldo) {
  const arch::VecVariant* v = variant_of(isa);
  if (v != nullptr && v->dot_block != nullptr && n % 16 == 0)
    return v->dot_block(a, lda, na, x, ldx, nx, n, out, ldo);
  for (int64_t i = 0; i < na; ++i) dot_rows_isa(isa, a + i * lda, x, ldx, nx, n, out + i * ldo);
}

void dot_block(const float* a, int64_t lda, int64_t na, const float* x, int64_t ldx, int64_t nx,
               int64_t n, float* out, int64_t ldo) {
  dot_block_isa(model_kernels().vec_isa(), a, lda, na, x, ldx, nx, n, out, ldo);
}

void axpy_block_isa(Isa isa, float* y, int64_t ldy, int64_t ny, const float* p, int64_t ldp,
                    const float* x, int64_t ldx, int64_t rows, int64_t n) {
  const arch::VecVariant* v = variant_of(isa);
  if (v != nullptr && v->axpy_block != nullptr)
    return v->axpy_block(y, ldy, ny, p, ldp, x, ldx, rows, n);
  for (int64_t i = 0; i < ny; ++i) axpy_rows(y + i * ldy, p + i * ldp, x, ldx, rows, n);
}

void axpy_block(float* y, int64_t ldy, int64_t ny, const float* p, int64_t ldp, const float* x,
                int64_t ldx, int64_t rows, int64_t n) {
  axpy_block_isa(model_kernels().vec_isa(), y, ldy, ny, p, ldp, x, ldx, rows, n);
}

void gdn_steps_isa(Isa isa, float* s, int64_t dk, int64_t dv, int64_t len, const GdnTokens& t) {
  const arch::VecVariant* v = variant_of(isa);
  if (v != nullptr && v->gdn_steps != nullptr) return v->gdn_steps(s, dk, dv, len, t);
  std::vector<float> m(static_cast<size_t>(dv));
  for (int64_t n = 0; n < len; ++n)
    gdn_step(s, dk, dv, t.eg[n], t.k + n * t.qkv_stride, t.q + n * t.qkv_stride,
             t.v + n * t.qkv_stride, t.beta[n], t.o + n * t.o_stride, m.data());
}

void gdn_steps(float* s, int64_t dk, int64_t dv, int64_t len, const GdnTokens& t) {
  gdn_steps_isa(model_kernels().vec_isa(), s, dk, dv, len, t);
}

}  // namespace kev::vec
