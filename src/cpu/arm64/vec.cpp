// The aarch64 vector kernels (vec.h's order, bit-identical to the portable loops): NEON
// dot_rows (one FMLA a step, as dot_fused) and gdn_steps.
//
// gdn_steps is bit-identical to len calls of vec::gdn_step (vec.h). Every value column of the
// state evolves on its own, so the columns run 4 to a float32x4_t lane group, each lane doing its
// element's operations of gdn_step in gdn_step's order: S *= eg; m += k_i S (i ascending);
// delta = beta (v - m); S += k_i delta; o += q_i S (i ascending), every product rounded before
// its add (FMUL then FADD/FSUB, never FMLA: the fixed order has no fused operation here).
// Thread safety: reentrant (gdn_steps keeps a thread_local scratch block per thread).
#include <arm_neon.h>

#include <algorithm>
#include <vector>

#include "cpu/arch.h"
#include "cpu/arm64/levels.h"
#include "cpu/arm64/tree16.h"

namespace kev::arch {
namespace {

// Two rows at a time against one vector: per row the 16 lane sums of dot_fused (one FMLA a
// step, i ascending) and its tree. n must be a multiple of 16.
void dot_rows_neon(const float* a, const float* x, int64_t ld, int64_t rows, int64_t n,
                   float* out) {
  int64_t r = 0;
  for (; r + 2 <= rows; r += 2) {
    const float* x0 = x + r * ld;
    const float* x1 = x0 + ld;
    float32x4_t s0[4], s1[4];
    for (int q = 0; q < 4; ++q) s0[q] = s1[q] = vdupq_n_f32(0.0f);
    for (int64_t i = 0; i < n; i += 16)
      for (int q = 0; q < 4; ++q) {
        const float32x4_t av = vld1q_f32(a + i + 4 * q);
        s0[q] = vfmaq_f32(s0[q], av, vld1q_f32(x0 + i + 4 * q));
        s1[q] = vfmaq_f32(s1[q], av, vld1q_f32(x1 + i + 4 * q));
      }
    out[r] = arm64::tree16(s0);
    out[r + 1] = arm64::tree16(s1);
  }
  for (; r < rows; ++r) {
    const float* xr = x + r * ld;
    float32x4_t s0[4];
    for (int q = 0; q < 4; ++q) s0[q] = vdupq_n_f32(0.0f);
    for (int64_t i = 0; i < n; i += 16)
      for (int q = 0; q < 4; ++q)
        s0[q] = vfmaq_f32(s0[q], vld1q_f32(a + i + 4 * q), vld1q_f32(xr + i + 4 * q));
    out[r] = arm64::tree16(s0);
  }
}

// One step of 4V value columns held contiguously (row i of the block at s + 4V i), with m, delta
// and o in registers: per element the multiplies and adds of gdn_step, in the same order.
template <int V>
void block_step(float* s, int64_t dk, float eg, const float* k, const float* q, const float* v,
                float beta, float* o) {
  constexpr int64_t kWidth = 4 * V;
  const float32x4_t egv = vdupq_n_f32(eg), bv = vdupq_n_f32(beta);
  float32x4_t acc[V], delta[V];
  for (int c = 0; c < V; ++c) acc[c] = vdupq_n_f32(0.0f);
  for (int64_t i = 0; i < dk; ++i) {  // S *= eg; m += k_i S
    float* row = s + i * kWidth;
    const float32x4_t ki = vdupq_n_f32(k[i]);
    for (int c = 0; c < V; ++c) {
      const float32x4_t r = vmulq_f32(vld1q_f32(row + 4 * c), egv);
      vst1q_f32(row + 4 * c, r);
      acc[c] = vaddq_f32(acc[c], vmulq_f32(ki, r));
    }
  }
  for (int c = 0; c < V; ++c) {  // delta = beta (v - m); o = 0
    delta[c] = vmulq_f32(bv, vsubq_f32(vld1q_f32(v + 4 * c), acc[c]));
    acc[c] = vdupq_n_f32(0.0f);
  }
  for (int64_t i = 0; i < dk; ++i) {  // S += k_i delta; o += q_i S
    float* row = s + i * kWidth;
    const float32x4_t ki = vdupq_n_f32(k[i]), qi = vdupq_n_f32(q[i]);
    for (int c = 0; c < V; ++c) {
      const float32x4_t r = vaddq_f32(vld1q_f32(row + 4 * c), vmulq_f32(ki, delta[c]));
      vst1q_f32(row + 4 * c, r);
      acc[c] = vaddq_f32(acc[c], vmulq_f32(qi, r));
    }
  }
  for (int c = 0; c < V; ++c) vst1q_f32(o + 4 * c, acc[c]);
}

using BlockStep = void (*)(float*, int64_t, float, const float*, const float*, const float*, float,
                           float*);
constexpr BlockStep kBlockSteps[] = {block_step<1>, block_step<2>, block_step<3>, block_step<4>,
                                     block_step<5>, block_step<6>, block_step<7>, block_step<8>};
constexpr int64_t kFull = 32;  // columns of a whole block (block_step<8>)

// Column block by column block, every token: a block's columns are copied out of the row-major
// state into a contiguous dk x width buffer (it stays in L1 for the whole sequence), stepped
// through all tokens and copied back. The last block (dv % 32 columns, if any) is zero-padded to
// a multiple of 4, with v read through a padded copy and o written through one.
void gdn_steps_neon(float* s, int64_t dk, int64_t dv, int64_t len, const vec::GdnTokens& t) {
  thread_local std::vector<float> block;
  block.resize(static_cast<size_t>(dk * kFull));
  for (int64_t j0 = 0; j0 < dv; j0 += kFull) {
    const int64_t cols = std::min(kFull, dv - j0);
    const int64_t vecs = (cols + 3) / 4, width = 4 * vecs;
    const BlockStep step = kBlockSteps[vecs - 1];
    std::fill(block.begin(), block.begin() + dk * width, 0.0f);
    for (int64_t i = 0; i < dk; ++i)
      std::copy(s + i * dv + j0, s + i * dv + j0 + cols, block.data() + i * width);
    float vpad[kFull] = {}, opad[kFull];
    for (int64_t n = 0; n < len; ++n) {
      const float* v = t.v + n * t.qkv_stride + j0;
      float* o = t.o + n * t.o_stride + j0;
      if (cols == width) {
        step(block.data(), dk, t.eg[n], t.k + n * t.qkv_stride, t.q + n * t.qkv_stride, v,
             t.beta[n], o);
      } else {
        std::copy(v, v + cols, vpad);
        step(block.data(), dk, t.eg[n], t.k + n * t.qkv_stride, t.q + n * t.qkv_stride, vpad,
             t.beta[n], opad);
        std::copy(opad, opad + cols, o);
      }
    }
    for (int64_t i = 0; i < dk; ++i)
      std::copy(block.data() + i * width, block.data() + i * width + cols, s + i * dv + j0);
  }
}

}  // namespace

const VecVariant* vec(Isa level) {
  static const VecVariant neon = {kNeon, &dot_rows_neon, &gdn_steps_neon, nullptr, nullptr};
  return level == kNeon ? &neon : nullptr;
}

}  // namespace kev::arch
