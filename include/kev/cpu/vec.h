// Small vector kernels for the forward (the model reaches them through model_kernels.h).
// Every function has a fixed order of operations independent of the instruction set: dot and
// sum_sq keep 16 lane sums (lane l takes i = l, l+16, ...) with separate multiply and add, then
// the fixed tree (l, l+8), (l, l+4), (l, l+2), (0, 1); elementwise ones have one rounding per
// operation. The attention kernels (dot_fused, dot_rows, dot_block, axpy_rows, axpy_block) keep
// the same lanes, tree and row order with one fused multiply-add per step (one rounding: every
// CPU kev targets has the instruction, and std::fma gives its bits where a loop is scalar), which
// doubles their ceiling on CPUs with two FMA pipes. The plain loops are src/cpu/portable/vec.cpp
// (on x86-64 compiled for AVX-512, AVX2 and baseline, target_clones); dot_rows, dot_block,
// axpy_block and gdn_steps have family forms (arch.h). Every form gives bitwise-identical
// results.
// Thread safety: every function may be called from any thread on disjoint outputs.
#pragma once
#include <cstdint>

#include "kev/core/fixed_math.h"
#include "kev/cpu/isa.h"

namespace kev::vec {

float dot(const float* a, const float* b, int64_t n);
// dot's lanes and tree with acc = fma(a_i, b_i, acc) per step: the attention scores' dot.
float dot_fused(const float* a, const float* b, int64_t n);
float sum_sq(const float* a, int64_t n);
// out[r] = dot_fused(a, x + r * ld, n) for r < rows, bit for bit; dot_rows runs the level the model
// kernel table picks (model_kernels.h; AVX2 four rows at a time, NEON two, when n % 16 == 0),
// dot_rows_isa a given one (the CPU must support it: Error kUnsupported otherwise).
void dot_rows(const float* a, const float* x, int64_t ld, int64_t rows, int64_t n, float* out);
void dot_rows_isa(Isa isa, const float* a, const float* x, int64_t ld, int64_t rows, int64_t n,
                  float* out);
void axpy(float* y, float a, const float* x, int64_t n);  // y += a * x
// y = fma(a[r], x_r, y) for rows x_r = x + r * ld, r = 0 .. rows-1 in order (the repeated axpy,
// each step fused: the attention outputs' sum).
void axpy_rows(float* y, const float* a, const float* x, int64_t ld, int64_t rows, int64_t n);
void scale(float* y, float a, int64_t n);  // y *= a
// y *= a, then the largest y (-inf for n = 0): a softmax's scaling and shift. The maximum does
// not depend on the order it is taken in (for inputs without NaN), so it runs in 16 lanes.
float scale_max(float* y, float a, int64_t n);
void divide(float* y, float d, int64_t n);  // y = y / d (a division each, not a reciprocal)

// The attention kernels, many rows at once with each result's own order unchanged:
// dot_block: out[i * ldo + j] = dot_fused(a + i * lda, x + j * ldx, n) for i < na, j < nx, bit
// for bit;
// axpy_block: axpy_rows(y + i * ldy, p + i * ldp, x, ldx, rows, n) for i < ny, bit for bit.
// The plain forms run the level the model kernel table picks (a family's forms hold tiles of
// results in registers, so each row read serves several); the _isa forms a given one (the CPU
// must support it: Error kUnsupported otherwise).
void dot_block(const float* a, int64_t lda, int64_t na, const float* x, int64_t ldx, int64_t nx,
               int64_t n, float* out, int64_t ldo);
void dot_block_isa(Isa isa, const float* a, int64_t lda, int64_t na, const float* x, int64_t ldx,
                   int64_t nx, int64_t n, float* out, int64_t ldo);
void axpy_block(float* y, int64_t ldy, int64_t ny, const float* p, int64_t ldp, const float* x,
                int64_t ldx, int64_t rows, int64_t n);
void axpy_block_isa(Isa isa, float* y, int64_t ldy, int64_t ny, const float* p, int64_t ldp,
                    const float* x, int64_t ldx, int64_t rows, int64_t n);

// The elementwise activations, with fixed_expf (kev/core/fixed_math.h: the same bits on every
// architecture). The array forms below apply exactly these per element (they vectorize; the
// bits are the scalar ones).
inline float sigmoid(float x) {
  return 1.0f / (1.0f + fixed_expf(-x));
}
inline float silu(float x) {
  return x / (1.0f + fixed_expf(-x));
}
void exp_shifted(float* y, float shift, int64_t n);     // y = exp(y - shift)
void silu(float* y, int64_t n);                         // y = silu(y)
void silu_mul(float* y, const float* u, int64_t n);     // y = silu(y) * u
void mul_sigmoid(float* y, const float* g, int64_t n);  // y = y * sigmoid(g)
// y = ((y * a) * w) * silu(g): the GDN output's gated RMSNorm once the norm's scale a is known.
void scale_mul_silu(float* y, float a, const float* w, const float* g, int64_t n);

// One recurrent gated-delta step on a state S[dk x dv] (row-major, row i = key dim i):
//   S *= eg; m = S^T k; delta = beta (v - m); S += k delta^T; o = S^T q.
// m and delta are scratch of length dv.
void gdn_step(float* s, int64_t dk, int64_t dv, float eg, const float* k, const float* q,
              const float* v, float beta, float* o, float* m);

// A sequence of len steps of one head: token n reads k, q, v at n * qkv_stride, exp(g) and beta
// at eg[n] and beta[n], and writes o at n * o_stride. Every value column of the state evolves on
// its own (step by step its m, delta and o involve only that column), so a family's form may run
// the sequence many columns at a time; per element the operations and their order are
// gdn_step's, so the result is bit-identical to len calls of gdn_step. gdn_steps runs the level
// the model kernel table picks; gdn_steps_isa a given one (portable: the gdn_step loop; another
// level: its family folder's form, src/cpu/<family>/vec.cpp; the CPU must support it: Error
// kUnsupported otherwise).
struct GdnTokens {
  const float *q, *k, *v;
  int64_t qkv_stride;
  const float *eg, *beta;
  float* o;
  int64_t o_stride;
};
void gdn_steps(float* s, int64_t dk, int64_t dv, int64_t len, const GdnTokens& t);
void gdn_steps_isa(Isa isa, float* s, int64_t dk, int64_t dv, int64_t len, const GdnTokens& t);

}  // namespace kev::vec
