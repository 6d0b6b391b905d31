// The big projections in the model's precision (private to the model layer; model.h, Precision):
// which projections each fast mode reduces (the int8 class selection and its KEV_INT8_CLASSES
// parser), their preparation at load time (quantization, packing, releasing the mapped BF16
// pages of what was copied) and the one call the layer math makes per projection, which runs
// through the model's kernel table (kev/cpu/model_kernels.h).
#pragma once
#include <cstdint>
#include <memory>
#include <unordered_map>
#include <vector>

#include "kev/core/aligned.h"
#include "kev/cpu/matrix.h"
#include "kev/cpu/model_kernels.h"
#include "kev/model/model.h"
#include "kev/model/weights.h"

namespace kev {

// The projections kInt8 and kW8A8 run reduced, keyed by their place in ModelWeights (the Bf16Matrix
// member; quant_plan.h lists them): each entry cuts the matrix's output rows into parts, in row
// order, each exact FP32 on BF16 rows, 8-bit or 4-bit (gemm_int8.h). A projection not listed
// runs in exact FP32. Built from the BF16 weights at load time (quantize_int8), or from a
// quantized bundle's stored parts, which then cover every row.
struct ReducedPart {
  RowPart rows;
  Bf16Matrix exact;  // kExact: the part's BF16 rows
  Int8Matrix q8;     // kQ8
  Int4Matrix q4;     // kQ4, kQ5, kQ4z and kQ5z
};
struct Int8Weights {
  std::unordered_map<const Bf16Matrix*, std::vector<ReducedPart>> by_matrix;
  const std::vector<ReducedPart>* find(const Bf16Matrix& m) const {
    auto it = by_matrix.find(&m);
    return it == by_matrix.end() ? nullptr : &it->second;
  }
};

// The projections kBf16 runs with BF16 activations, keyed like Int8Weights: the same selection
// as int8's default (model.h), each entry a range of the matrix's output rows; the other rows
// (and any projection not listed) run in exact FP32. Where the kernel table has a bf16 dot
// kernel (model_kernels.h: has_bf16_dot) the range is also packed into its pair layout;
// otherwise it takes the rounding path of project().
struct Bf16Part {
  int64_t row0 = 0, row1 = 0;
  Bf16PairMatrix pairs;  // empty without a bf16 dot kernel
};
struct Bf16DotWeights {
  bool packed = false;  // the parts hold pair-layout copies for the kernel table's bf16 dot
  std::unordered_map<const uint16_t*, Bf16Part> by_data;
  const Bf16Part* find(const Bf16Matrix& m) const {
    auto it = by_data.find(m.data);
    return it == by_data.end() ? nullptr : &it->second;
  }
};

// Output rows [r0, r1) of m.
inline Bf16Matrix rows_of(const Bf16Matrix& m, int64_t r0, int64_t r1) {
  return Bf16Matrix{m.data + r0 * m.cols, r1 - r0, m.cols};
}

// The selection spec (quant_plan.h) each fast mode reduces: KEV_BF16_CLASSES / KEV_INT8_CLASSES
// where set, else the mode's default; "stored" for int8 on a quantized bundle (its own parts).
// Part of a saved state's identity, since the selection changes the bits.
std::string bf16_selection();
std::string int8_selection(const ModelWeights& w);

// kBf16's projections (bf16_default_spec, or KEV_BF16_CLASSES: one range of rows per
// projection, else Error(kBadInput)) and kInt8's (the default selection, or KEV_INT8_CLASSES; a
// quantized bundle's stored parts), built once; the copied rows' mapped pages are released.
// kBf16 packs for `kernels`' bf16 dot kernel where it has one.
std::unique_ptr<Bf16DotWeights> prepare_bf16(const ModelWeights& w, const ModelKernels& kernels,
                                             size_t threads);
std::unique_ptr<Int8Weights> prepare_int8(const ModelWeights& w, size_t threads);

// y[rows, m.rows] (row stride m.rows) = x * m^T through `kernels` in `precision`: the selected rows
// of a reduced projection through its int8 / bf16 kernel, every other row in exact FP32. int8
// (bf16) must be the prepared weights when precision is kInt8 or kW8A8 (kBf16). `rounded` is
// scratch.
void project(const ModelKernels& kernels, Precision precision, const Int8Weights* int8,
             const Bf16DotWeights* bf16, const float* x, int64_t rows, int64_t ldx,
             const Bf16Matrix& m, float* y, size_t threads, AlignedVector<float>& rounded);

}  // namespace kev
