// Small vector kernels for the forward (private to the model layer).
// Every function has a fixed order of operations independent of the instruction set: dot and
// sum_sq keep 16 lane sums (lane l takes i = l, l+16, ...) with separate multiply and add, then
// the fixed tree (l, l+8), (l, l+4), (l, l+2), (0, 1); elementwise ones have one rounding per
// operation. They are compiled for AVX-512, AVX2 and baseline (target_clones) and give
// bitwise-identical results on each.
#pragma once
#include <cstdint>

namespace kev::vec {

float dot(const float* a, const float* b, int64_t n);
float sum_sq(const float* a, int64_t n);
void axpy(float* y, float a, const float* x, int64_t n);  // y += a * x
// y += a[r] * x_r for rows x_r = x + r * ld, r = 0 .. rows-1 in order (the repeated axpy).
void axpy_rows(float* y, const float* a, const float* x, int64_t ld, int64_t rows, int64_t n);
void scale(float* y, float a, int64_t n);  // y *= a

// One recurrent gated-delta step on a state S[dk x dv] (row-major, row i = key dim i):
//   S *= eg; m = S^T k; delta = beta (v - m); S += k delta^T; o = S^T q.
// m and delta are scratch of length dv.
void gdn_step(float* s, int64_t dk, int64_t dv, float eg, const float* k, const float* q,
              const float* v, float beta, float* o, float* m);

}  // namespace kev::vec
