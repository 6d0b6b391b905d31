// The NEON (aarch64 Advanced SIMD) form of vec::gdn_steps (private to the model layer; defined
// only when KEV_ARM64, kev/core/kernel_order.h).
//
// Contract: bit-identical to len calls of vec::gdn_step (vec.h). Every value column of the state
// evolves on its own, so the columns run 4 to a float32x4_t lane group, each lane doing its
// element's operations of gdn_step in gdn_step's order: S *= eg; m += k_i S (i ascending);
// delta = beta (v - m); S += k_i delta; o += q_i S (i ascending), every product rounded before
// its add (FMUL then FADD/FSUB, never FMLA: the fixed order has no fused operation here).
// Thread safety: reentrant (a thread_local scratch block per thread).
#pragma once
#include <cstdint>

#include "model/vec.h"

namespace kev::vec {

void gdn_steps_neon(float* s, int64_t dk, int64_t dv, int64_t len, const GdnTokens& t);

}  // namespace kev::vec
