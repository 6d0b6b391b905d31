// The LoRA merge kernel, bit-identical to Debian torch 1.13 on CPU computing
//   (W.float() + (B.float() @ A.float()) * scale).to(torch.bfloat16)
//
// Order of operations for every element (i, j), all in IEEE binary32:
//   acc = +0.0f; for p = 0 .. r-1: acc = fma(B[i,p], A[p,j], acc)   (fused, one rounding/step)
//   t = acc * scale;  s = f32(W[i,j]) + t;  out = bf16 round-to-nearest-even(s), NaN -> 0x7FC0
// The product order is what torch's sgemm (Debian's OpenBLAS) does for a K = r inner
// dimension: one fused multiply-add per k, k ascending, from a zeroed accumulator; we measured
// it against torch on many shapes (tests/integration/test_export_merge.py keeps checking it).
// The build uses -ffp-contract=off; the fused steps are explicit (std::fma / FMA intrinsics),
// so no variant (scalar, AVX2, AVX-512) can differ from another.
//
// Pointers need no alignment. w and out are row-major BF16 [rows, cols]; b is [rows, r] F32 (the
// rows of B matching w's rows); a is [r, cols] F32.
#pragma once
#include <cstdint>

namespace kev {

enum class MergeIsa { kScalar, kAvx2, kAvx512 };

// The fastest variant this CPU runs; KEV_MERGE_ISA=scalar|avx2|avx512 may lower it (tests).
MergeIsa merge_isa();
const char* merge_isa_name(MergeIsa isa);

void merge_lora_rows(const void* w, const float* b, const float* a, int64_t rank, int64_t cols,
                     float scale, int64_t rows, void* out, MergeIsa isa);

}  // namespace kev
