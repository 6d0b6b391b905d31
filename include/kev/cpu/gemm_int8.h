// Blockwise int8-weight matrix products for `--precision int8` (see model.h, Precision; which
// projections run here and which stay FP32 is decided there, not in this kernel).
//
// Quantization (weights once at load time, activations at every call; one rule for both with
// its own range Q): K is split into blocks of 32 (the last one zero-padded). For a row r and
// block b, amax = max |v|, scale = amax / Q and q = nearbyint(v * (Q / amax)) clamped to
// [-Q, Q] (all zeros and scale 0 when amax < 1e-30). Weights: Q = 127 (int8, one FP32 scale per
// output row per block). Activations (ActivationWidth), per row per block: Q = 32767 (k16Bit,
// `--precision int8`: int16 products cost the int16 kernels nothing and halve the error) or
// Q = 127 (k8Bit, `--precision w8a8`: what the byte kernels multiply, vpdpbusd at twice
// vpdpwssd's rate; docs/performance.md, "Precision modes").
//
// gemm_int8: y[m, n] = sum over blocks b in ascending order of
//   acc = fma(float(isum_b), sx[m][b] * sw[n][b], acc), acc starting at 0,
// where isum_b = sum_k qx[m][k] * qw[n][k] over the block is an exact int32 (|isum| <= 32 *
// 32767 * 127 < 2^31) and float() rounds to nearest even. A byte kernel sums u * qw with
// u = qx + 128 in [1, 255] and subtracts 128 * sum_k qw: the same exact int32. That order
// depends on K only and on the activation width: an
// output never depends on the batch, the thread split or the level (every kernel registered in
// precision_kernels.h is bitwise identical to the portable one; a kernel that fails its
// start-up probe is replaced by its family's next one for the process).
#pragma once
#include <cstddef>
#include <cstdint>
#include <vector>

#include "kev/cpu/isa.h"
#include "kev/cpu/matrix.h"

namespace kev {

Int8Matrix quantize_int8(const Bf16Matrix& w, size_t threads = 0);

// The activations' range (above): int16 (Q = 32767) or int8 (Q = 127).
enum class ActivationWidth { k16Bit, k8Bit };

// The int8 kernels' level: the best this CPU supports, capped by KEV_GEMM_ISA / KEV_ISA like the
// FP32 GEMM, or the level of the kernel its family fell back to where one failed its probe
// (`kev cpu`: "gemm_int8"; the exact kernel is best_int8_kernel(), precision_kernels.h).
Isa best_int8_isa();

// Quantizes x (rows x K, row stride ldx) per row and block, then y = x * W^T as above.
void gemm_int8(const float* x, int64_t rows, int64_t ldx, const Int8Matrix& w, float* y,
               int64_t ldy, size_t threads = 0, ActivationWidth width = ActivationWidth::k16Bit);
// isa must be supported by this CPU; it runs the kernel its family chose for that level
// (int8_kernel_for, precision_kernels.h).
void gemm_int8_isa(Isa isa, const float* x, int64_t rows, int64_t ldx, const Int8Matrix& w,
                   float* y, int64_t ldy, size_t threads,
                   ActivationWidth width = ActivationWidth::k16Bit);

// The weight rule above (Q = 127), for one row of n values: q [blocks * 32] (zero-padded),
// scale [blocks]. Also the q8 rule of quantized bundles (below).
void quantize_row_int8(const float* v, int64_t n, int8_t* q, float* scale);

// Weights stored quantized in a bundle (`kev quantize`, docs/bundle-format.md "Quantized
// bundles"), row-major, the last block of a row zero-padded:
// - q8: int8 [rows][blocks * 32] and FP32 scales [rows][blocks], by quantize_row_int8.
// - q4: bytes [rows][blocks * 16] (k = 2i in the low nibble of byte i, k = 2i + 1 in the high,
//   two's complement) and F16 scales [rows][blocks], by quantize_row_q4: per block, m = the
//   value of largest magnitude (the first), s = f16(m / -8) (round to nearest even; negative
//   when m is positive), q = nearbyint(v / f32(s)) clamped to [-8, 7] (m itself becomes -8, so
//   every level is used); a block with |m| < 1e-30, or whose s rounds to 0, is all zeros with
//   s = 0.
// - q5: q4's rule with 5 bits: s = f16(m / -16), q clamped to [-16, 15]; bytes [rows][blocks *
//   20]: per block q4's 16 bytes of the values' low 4 bits, then a little-endian 32-bit word whose
//   bit k is bit 4 of value k (5-bit two's complement) -- 0.6875 bytes per weight.
// All run through the int8 kernels with the contract above (the F16 scale widened exactly), so
// a q8 matrix gives the bits of quantize_int8 on the same BF16 rows, and q4 / q5 the same bits on
// every kernel. quantize_row_q4 / _q5 return false, writing nothing useful, where a block's s
// would overflow F16 (|m| / 8 or |m| / 16 >= 65520).
bool quantize_row_q4(const float* v, int64_t n, uint8_t* q, uint16_t* scale);
bool quantize_row_q5(const float* v, int64_t n, uint8_t* q, uint16_t* scale);
// - q4z (4 bits with a fitted step and zero, 4.5625 bits per weight): a block (zero-padded to 32)
//   stores t in [-8, 7] and means v ~ (d * sc / 8) * (8 t + z), with sc in [1, 255] (a byte), z
//   in [-63, 63] (an int8) and d the F16 scale of its super-block of 8 blocks along the row. In
//   binary32 with round-to-nearest-even throughout (no fused multiply-add):
//   per block lo = min v, hi = max v, r = max((hi - lo) / 15, max(-lo, hi) / 14); per super-block
//   d = f16(max r / 255) (all zeros, sc = z = 0, where d is 0); per block, fit(sc, z) gives
//   t[k] = clamp(nearbyint(v[k] / (d sc) - z / 8), -8, 7) and the squared error summed in k's
//   order; sc0 = clamp(nearbyint(r / d), 1, 255); for f in (1, 0.98f, 0.96f): sc =
//   clamp(nearbyint(sc0 f), 1, 255), z0 = nearbyint(8 ((lo + hi) / (2 (d sc)) + 0.5)); for dz in
//   (-1, 0, 1): z = clamp(z0 + dz, -63, 63), fit(sc, z), then the least-squares line v ~ a t + c
//   through that fit's t (sums in k's order; skipped where n Stt - St^2 <= 0 or a <= 0) gives
//   sc = clamp(nearbyint(a / d), 1, 255), z = clamp(nearbyint(8 c / (d sc)), -63, 63), fit again;
//   the first fit of least error wins. Bytes [rows][blocks * 18]: per block q4's 16 bytes of
//   nibbles, then sc, then z; F16 d [rows][ceil(blocks / 8)]. Returns false on a non-finite value
//   or an F16 overflow of d. 8 t + z is in [-127, 119]: the int8 kernels run it as is.
bool quantize_row_q4z(const float* v, int64_t n, uint8_t* q, uint16_t* super_scale);
// - q5z (5 bits with a fitted step and zero, 5.5625 bits per weight): q4z's rule with t in [-16,
//   15] and the zero in quarters of a step: v ~ (d * sc / 4) * (4 t + z); r = max((hi - lo) / 31,
//   max(-lo, hi) / 30); t[k] = clamp(nearbyint(v[k] / (d sc) - z / 4), -16, 15); z0 =
//   nearbyint(4 ((lo + hi) / (2 (d sc)) + 0.5)); the refit's z = clamp(nearbyint(4 c / (d sc)),
//   -63, 63); otherwise q4z's search word for word. Bytes [rows][blocks * 22]: per block q5's 20
//   bytes (nibbles, then the little-endian word of the fifth bits), then sc, then z; F16 d
//   [rows][ceil(blocks / 8)]. 4 t + z is in [-127, 123].
bool quantize_row_q5z(const float* v, int64_t n, uint8_t* q, uint16_t* super_scale);
// The kernels' layouts of stored rows (q and scale may be unaligned; cols > 0).
Int8Matrix pack_q8_rows(const void* q, const void* scale, int64_t rows, int64_t cols,
                        size_t threads = 0);
Int4Matrix pack_q4_rows(const void* q, const void* scale, int64_t rows, int64_t cols,
                        size_t threads = 0);
Int4Matrix pack_q5_rows(const void* q, const void* scale, int64_t rows, int64_t cols,
                        size_t threads = 0);
Int4Matrix pack_q4z_rows(const void* q, const void* super_scale, int64_t rows, int64_t cols,
                         size_t threads = 0);
Int4Matrix pack_q5z_rows(const void* q, const void* super_scale, int64_t rows, int64_t cols,
                         size_t threads = 0);
// (gemm_int4_kernel, precision_kernels.h, runs a q4, q5, q4z or q5z matrix.)

}  // namespace kev
