// The LoRA merge kernel: the reference's
//   (W.float() + (B.float() @ A.float()) * scale).to(torch.bfloat16)
// with one fixed order of operations, which is the bundle's reproducibility contract
// (docs/bundle-format.md "Merge"): every element (i, j), all in IEEE binary32,
//   acc = +0.0f; for p = 0 .. r-1: acc = fma(B[i,p], A[p,j], acc)   (fused, one rounding/step)
//   t = acc * scale;  s = f32(W[i,j]) + t;  out = bf16 round-to-nearest-even(s), NaN -> 0x7FC0
// The build uses -ffp-contract=off; the fused steps are explicit (std::fma / FMA intrinsics),
// so no variant (portable; AVX2, AVX-512 on x86-64; NEON on aarch64) can differ from another,
// and an export writes the same bytes on every CPU and architecture. Torch's sgemm uses this
// order on some CPUs (then its bytes equal ours) and another elsewhere (then it differs by one
// BF16 ulp in a few elements).
//
// Pointers need no alignment. w and out are row-major BF16 [rows, cols]; b is [rows, r] F32 (the
// rows of B matching w's rows); a is [r, cols] F32.
#pragma once
#include <cstdint>

#include "kev/cpu/isa.h"

namespace kev {

// The fastest variant this CPU runs, capped by KEV_MERGE_ISA / KEV_ISA (kev/cpu/isa.h); read
// once per process. Every variant writes the same bytes.
Isa merge_isa();

void merge_lora_rows(const void* w, const float* b, const float* a, int64_t rank, int64_t cols,
                     float scale, int64_t rows, void* out, Isa isa);

}  // namespace kev
