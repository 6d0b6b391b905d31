// The portable LoRA merge: merge.h's order, one element at a time.
#include <cmath>
#include <cstring>

#include "cpu/portable/portable.h"
#include "kev/core/bf16.h"

namespace kev::portable {
namespace {

inline float merged_f32(const float* b_row, const float* a, int64_t rank, int64_t cols, int64_t j,
                        float w, float scale) {
  float acc = 0.0f;
  for (int64_t p = 0; p < rank; ++p) acc = std::fma(b_row[p], a[p * cols + j], acc);
  float t = acc * scale;
  return w + t;
}

}  // namespace

void merge_columns(const uint8_t* w_row, const float* b_row, const float* a, int64_t rank,
                   int64_t cols, float scale, int64_t j0, uint8_t* out_row) {
  for (int64_t j = j0; j < cols; ++j) {
    uint16_t wb;
    std::memcpy(&wb, w_row + 2 * j, 2);
    uint16_t r = f32_to_bf16(merged_f32(b_row, a, rank, cols, j, bf16_to_f32(wb), scale));
    std::memcpy(out_row + 2 * j, &r, 2);
  }
}

void merge_rows(const uint8_t* w, const float* b, const float* a, int64_t rank, int64_t cols,
                float scale, int64_t rows, uint8_t* out) {
  for (int64_t i = 0; i < rows; ++i)
    merge_columns(w + 2 * i * cols, b + i * rank, a, rank, cols, scale, 0, out + 2 * i * cols);
}

}  // namespace kev::portable
