// The int8 GEMM's architecture-free part (gemm_int8.h): the quantization rule, the packing of
// Int8Matrix, the activation quantization and the split of output groups over threads. The
// kernels come from the family folder (arch::int8_range), the portable folder or the AVX-512
// emulation; a faster block quantizer from the family folder where it has one (same values).
#include "kev/cpu/gemm_int8.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "cpu/arch.h"
#include "cpu/bodies/int8_layout.h"
#include "cpu/drivers/group_chunks.h"
#include "cpu/drivers/precision_variants.h"
#include "cpu/levels.h"
#include "cpu/portable/portable.h"
#include "kev/core/bf16.h"
#include "kev/core/error.h"
#include "kev/core/threads.h"
#include "kev/cpu/model_kernels.h"
#include "kev/cpu/precision_kernels.h"

namespace kev {
namespace {

using int8_layout::kGroup;
using int8_layout::kPairs;
constexpr float kWeightMax = 127.0f;  // int8 weights

// The activations' Q (gemm_int8.h).
float activation_max(ActivationWidth width) {
  return width == ActivationWidth::k8Bit ? 127.0f : 32767.0f;
}

// One block of the quantization rule (gemm_int8.h); n <= 32 values, the rest of q zero.
template <typename Q, typename Load>
float quantize_block(Load load, int64_t n, Q* q, float qmax) {
  float amax = 0.0f;
  for (int64_t i = 0; i < n; ++i) amax = std::max(amax, std::fabs(load(i)));
  if (!(amax >= 1e-30f)) {  // zero (or subnormal-only, or NaN) block
    for (int64_t i = 0; i < kQuantBlock; ++i) q[i] = 0;
    return 0.0f;
  }
  const float inv = qmax / amax;
  for (int64_t i = 0; i < kQuantBlock; ++i) {
    float r = i < n ? std::nearbyint(load(i) * inv) : 0.0f;
    q[i] = static_cast<Q>(std::min(qmax, std::max(-qmax, r)));
  }
  return amax / qmax;
}

template <typename Q>
void quantize_row(const float* v, int64_t n, Q* q, float* scale, float qmax) {
  const int64_t blocks = (n + kQuantBlock - 1) / kQuantBlock;
  for (int64_t b = 0; b < blocks; ++b) {
    const float* vb = v + b * kQuantBlock;
    scale[b] =
        quantize_block([vb](int64_t i) { return vb[i]; },
                       std::min(kQuantBlock, n - b * kQuantBlock), q + b * kQuantBlock, qmax);
  }
}

// One row by blocks through a family's block quantizer (same values as quantize_row): a short
// last block is zero-padded first.
template <typename Q>
void quantize_row_with(arch::QuantizeBlock block, const float* v, int64_t n, Q* q, float* scale,
                       float qmax) {
  const int64_t blocks = (n + kQuantBlock - 1) / kQuantBlock;
  alignas(32) float pad[kQuantBlock];
  alignas(32) int32_t qi[kQuantBlock];
  for (int64_t b = 0; b < blocks; ++b) {
    const int64_t len = std::min(kQuantBlock, n - b * kQuantBlock);
    const float* src = v + b * kQuantBlock;
    if (len < kQuantBlock) {
      std::fill(pad, pad + kQuantBlock, 0.0f);
      std::copy(src, src + len, pad);
      src = pad;
    }
    scale[b] = block(src, qi, qmax);
    for (int64_t i = 0; i < kQuantBlock; ++i) q[b * kQuantBlock + i] = static_cast<Q>(qi[i]);
  }
}

// quantize_row, through the family's block quantizer when `fast` and there is one.
template <typename Q>
void quantize_row_as(bool fast, const float* v, int64_t n, Q* q, float* scale, float qmax) {
  const arch::QuantizeBlock block = fast ? arch::quantize_block() : nullptr;
  if (block != nullptr) return quantize_row_with<Q>(block, v, n, q, scale, qmax);
  quantize_row<Q>(v, n, q, scale, qmax);
}

// Activations quantized per row: int16 [rows_padded][blocks * 32], scales [rows_padded][blocks];
// for a byte kernel, instead of q, u = q + 128 as bytes (padding rows too: u = 128 is q = 0).
struct QuantRows {
  std::vector<int16_t> q;
  std::vector<uint8_t> u;
  std::vector<float> s;
  int64_t kp = 0, blocks = 0;
};

void quantize_activations(const float* x, int64_t rows, int64_t ldx, int64_t k_total,
                          int64_t rows_padded, bool fast, ActivationWidth width, bool bytes,
                          QuantRows& out, size_t threads) {
  out.blocks = (k_total + kQuantBlock - 1) / kQuantBlock;
  out.kp = out.blocks * kQuantBlock;
  const size_t n = static_cast<size_t>(rows_padded * out.kp);
  // Every element is written below (each row whole, its last block's padding included, by the
  // worker that quantizes it; the padding rows here), so the buffers are only sized: no serial
  // fill pass before the parallel one.
  if (bytes) {
    out.q.clear();
    out.u.resize(n);
    std::fill(out.u.begin() + rows * out.kp, out.u.end(), uint8_t{128});
  } else {
    out.u.clear();
    out.q.resize(n);
    std::fill(out.q.begin() + rows * out.kp, out.q.end(), int16_t{0});
  }
  out.s.resize(static_cast<size_t>(rows_padded * out.blocks));
  std::fill(out.s.begin() + rows * out.blocks, out.s.end(), 0.0f);
  const float qmax = activation_max(width);
  parallel_for(
      static_cast<size_t>(rows),
      [&](size_t r) {
        const int64_t m = static_cast<int64_t>(r);
        float* s = out.s.data() + m * out.blocks;
        if (!bytes) {
          int16_t* q = out.q.data() + m * out.kp;
          quantize_row_as<int16_t>(fast, x + m * ldx, k_total, q, s, qmax);  // pads with zeros
          return;
        }
        thread_local std::vector<int8_t> q;
        q.resize(static_cast<size_t>(out.kp));
        quantize_row_as<int8_t>(fast, x + m * ldx, k_total, q.data(), s, qmax);
        uint8_t* u = out.u.data() + m * out.kp;
        for (int64_t k = 0; k < out.kp; ++k)
          u[k] = static_cast<uint8_t>(q[static_cast<size_t>(k)] + 128);
      },
      threads);
}

void check_int8_kernel(Int8Kernel k) {
  if (!int8_kernel_supported(k))
    fail(ErrorKind::kUnsupported, "this CPU cannot run the {} int8 kernel", int8_kernel_name(k));
}

// x's rows quantized for kernel k (padded to its tile where it tiles) into this thread's buffer:
// the pool's workers read the caller's buffer, not their own. A family's block quantizer gives
// the portable one's values; the emulation may run where the CPU has none.
const QuantRows& activations_for(Int8Kernel k, ActivationWidth width, const float* x, int64_t rows,
                                 int64_t ldx, int64_t cols, size_t threads) {
  const bool tiled = k != kPortableInt8Kernel;
  const int64_t rows_padded =
      tiled ? (rows + kInt8TileRows - 1) / kInt8TileRows * kInt8TileRows : rows;
  thread_local QuantRows buffer;
  quantize_activations(x, rows, ldx, cols, rows_padded, tiled, width, int8_kernel_reads_bytes(k),
                       buffer, threads);
  return buffer;
}

// The kernel k's range over quantized activations a: its word or its byte form.
struct KernelRange {
  arch::Int8Range words = nullptr;
  arch::Int8ByteRange bytes = nullptr;
  void operator()(const QuantRows& a, int64_t rows, const Int8Matrix& w, float* y, int64_t ldy,
                  int64_t g0, int64_t g1) const {
    if (bytes != nullptr)
      bytes(a.u.data(), a.kp, a.s.data(), rows, w, y, ldy, g0, g1);
    else
      words(a.q.data(), a.kp, a.s.data(), rows, w, y, ldy, g0, g1);
  }
};

// The shared frame of the int8 and q4 products: checks, x quantized once, then body(range, x's
// rows, g0, g1) on each worker's chunk of w's output groups.
template <typename Matrix, typename Body>
void over_groups(Int8Kernel k, ActivationWidth width, const float* x, int64_t rows, int64_t ldx,
                 const Matrix& w, size_t threads, Body body) {
  check_int8_kernel(k);
  const bool bytes = int8_kernel_reads_bytes(k);
  if (bytes && width != ActivationWidth::k8Bit)
    fail(ErrorKind::kUnsupported, "the {} int8 kernel multiplies 8-bit activations only",
         int8_kernel_name(k));
  if (rows <= 0 || w.rows <= 0) return;
  if (threads == 0) threads = default_workers();
  const QuantRows& a = activations_for(k, width, x, rows, ldx, w.cols, threads);
  KernelRange range;
  if (bytes)
    range.bytes = kernel_byte_range(k);
  else
    range.words = kernel_range(k);
  group_chunks::run(w.groups, threads, 1, [&](int64_t g0, int64_t g1) { body(range, a, g0, g1); });
}

}  // namespace

void quantize_row_int8(const float* v, int64_t n, int8_t* q, float* scale) {
  quantize_row<int8_t>(v, n, q, scale, kWeightMax);
}

Int8Matrix quantize_int8(const Bf16Matrix& w, size_t threads) {
  Int8Matrix m;
  m.rows = w.rows;
  m.cols = w.cols;
  m.blocks = (w.cols + kQuantBlock - 1) / kQuantBlock;
  m.groups = (w.rows + kGroup - 1) / kGroup;
  m.q = ZeroedBuffer<int8_t>(static_cast<size_t>(m.groups * kGroup * m.blocks * kQuantBlock));
  m.scale = ZeroedBuffer<float>(static_cast<size_t>(m.groups * m.blocks * kGroup));
  const bool fast = gemm_level() != Isa::kPortable;  // the same values either way
  parallel_for(
      static_cast<size_t>(m.groups),
      [&](size_t gi) {
        const int64_t g = static_cast<int64_t>(gi);
        std::vector<float> row(static_cast<size_t>(w.cols));
        std::vector<int8_t> q(static_cast<size_t>(m.blocks * kQuantBlock));
        std::vector<float> sc(static_cast<size_t>(m.blocks));
        for (int64_t j = 0; j < kGroup && g * kGroup + j < w.rows; ++j) {
          const uint16_t* src = w.data + (g * kGroup + j) * w.cols;
          for (int64_t k = 0; k < w.cols; ++k) {
            uint16_t h;
            std::memcpy(&h, src + k, 2);  // the mapping may be unaligned
            row[static_cast<size_t>(k)] = bf16_to_f32(h);
          }
          quantize_row_as<int8_t>(fast, row.data(), w.cols, q.data(), sc.data(), kWeightMax);
          for (int64_t b = 0; b < m.blocks; ++b) {
            m.scale[static_cast<size_t>((g * m.blocks + b) * kGroup + j)] =
                sc[static_cast<size_t>(b)];
            // The 32 values of a block are 16 pairs 32 bytes apart in the packed group.
            int8_t* dst = m.q.data() + int8_layout::packed_offset(m.blocks, g, j, b * kQuantBlock);
            for (int64_t p = 0; p < kPairs; ++p) {
              dst[p * kGroup * 2] = q[static_cast<size_t>(b * kQuantBlock + 2 * p)];
              dst[p * kGroup * 2 + 1] = q[static_cast<size_t>(b * kQuantBlock + 2 * p + 1)];
            }
          }
        }
      },
      threads == 0 ? default_workers() : threads);
  return m;
}

namespace {

// q4 (bits 4) and q5 (bits 5) of one row (gemm_int8.h): per block of 32, the largest magnitude
// (the first such value, signed) becomes -2^(bits-1), so every level is used; q4's 16 bytes of
// low nibbles, then for q5 a little-endian word of the fifth bits.
bool quantize_row_low_bits(const float* v, int64_t n, int bits, uint8_t* q, uint16_t* scale) {
  const int64_t blocks = (n + kQuantBlock - 1) / kQuantBlock;
  const int64_t block_bytes = kQuantBlock / 2 + (bits == 5 ? 4 : 0);
  const float lo = -static_cast<float>(1 << (bits - 1)), hi = -lo - 1.0f;
  for (int64_t b = 0; b < blocks; ++b) {
    const int64_t len = std::min(kQuantBlock, n - b * kQuantBlock);
    const float* vb = v + b * kQuantBlock;
    uint8_t* qb = q + b * block_bytes;
    std::fill(qb, qb + block_bytes, uint8_t{0});
    scale[b] = 0;
    float amax = 0.0f, m = 0.0f;
    for (int64_t i = 0; i < len; ++i)
      if (std::fabs(vb[i]) > amax) {
        amax = std::fabs(vb[i]);
        m = vb[i];
      }
    if (!(amax >= 1e-30f)) continue;
    const uint16_t s16 = f32_to_f16(m / lo);
    if ((s16 & 0x7c00u) == 0x7c00u) return false;  // |m| / 2^(bits-1) overflows F16
    const float s = f16_to_f32(s16);
    if (s == 0.0f) continue;
    scale[b] = s16;
    uint32_t fifth = 0;
    for (int64_t i = 0; i < len; ++i) {
      const int r = static_cast<int>(std::min(hi, std::max(lo, std::nearbyint(vb[i] / s))));
      const auto nib = static_cast<uint8_t>(r & 0xf);
      qb[i / 2] |= static_cast<uint8_t>(i % 2 == 0 ? nib : nib << 4);
      fifth |= static_cast<uint32_t>((r >> 4) & 1) << i;
    }
    if (bits == 5)
      for (int k = 0; k < 4; ++k) qb[kQuantBlock / 2 + k] = static_cast<uint8_t>(fifth >> (8 * k));
  }
  return true;
}

}  // namespace

bool quantize_row_q4(const float* v, int64_t n, uint8_t* q, uint16_t* scale) {
  return quantize_row_low_bits(v, n, 4, q, scale);
}

bool quantize_row_q5(const float* v, int64_t n, uint8_t* q, uint16_t* scale) {
  return quantize_row_low_bits(v, n, 5, q, scale);
}

namespace {

constexpr int kFittedZeroMax = 63;  // |z|: unit * t + z stays within the int8 rule's [-127, 127]

// How a low-bit kind stores a block (gemm_int8.h): t in [-2^(bits-1), 2^(bits-1) - 1], the 16
// bytes of low nibbles, for 5 bits the word of the fifth bits after them; a fitted kind (q4z,
// q5z) has its zero in 1/zero_unit of a step, (d sc / zero_unit) (zero_unit t + z), sc and z last
// in the block and F16 super-block scales per 8 blocks; q4 / q5 (zero_unit 0) one F16 scale per
// block in the scale rows. span and guard size a fitted block's first step (r below).
struct LowBitForm {
  int bits, zero_unit;
  constexpr bool fifth() const { return bits == 5; }
  constexpr bool fitted() const { return zero_unit != 0; }
  constexpr int64_t block_bytes() const { return kPairs + (fifth() ? 4 : 0) + (fitted() ? 2 : 0); }
  constexpr float t_lo() const { return -static_cast<float>(1 << (bits - 1)); }
  constexpr float t_hi() const { return static_cast<float>((1 << (bits - 1)) - 1); }
  constexpr float unit() const { return static_cast<float>(zero_unit); }
  constexpr float span() const { return static_cast<float>((1 << bits) - 1); }
  constexpr float guard() const { return span() - 1.0f; }
};
constexpr LowBitForm kQ4Form{4, 0}, kQ5Form{5, 0}, kQ4zForm{4, 8}, kQ5zForm{5, 4};
static_assert(kQ4zForm.block_bytes() == kQ4zBlockBytes && kQ5zForm.block_bytes() == kQ5zBlockBytes);

// nearbyint(x) in round-to-nearest-even for |x| < 2^22 (x + 1.5 * 2^23 has a unit last place),
// without the library call; only the sign of a zero result may differ, which no use here sees.
inline float round_even_small(float x) {
  constexpr float kShift = 12582912.0f;  // 1.5 * 2^23
  return (x + kShift) - kShift;
}

// The values of one zero-padded block v at step s = d * sc (exact) and zero z: t[k] (the stored
// value) and the block's squared error, summed in k's order. |v[k] / s| <= guard * 255 * 2 (r >=
// |v| / guard, and d >= (max r / 255) / 2 even where it is an F16 subnormal), so the rounding's
// argument is far below 2^22. 1 / unit is a power of two: the products by it are exact.
float fitted_fit(const LowBitForm& rule, const float* v, float d, float sc, float z, float* t) {
  const float inv = 1.0f / rule.unit();
  const float s = d * sc, step = s * inv, zf = z * inv;
  float sq[kQuantBlock];
  for (int64_t k = 0; k < kQuantBlock; ++k) {
    t[k] = std::min(rule.t_hi(), std::max(rule.t_lo(), round_even_small(v[k] / s - zf)));
    const float e = v[k] - step * (rule.unit() * t[k] + z);
    sq[k] = e * e;
  }
  float err = 0.0f;
  for (int64_t k = 0; k < kQuantBlock; ++k) err = err + sq[k];
  return err;
}

float clamp_zero(float z) {
  return std::min(static_cast<float>(kFittedZeroMax),
                  std::max(static_cast<float>(-kFittedZeroMax), z));
}

// The scale index and zero of a least-squares line v ~ a * t + c through the values t gave (none
// where the t are all equal or the slope is not positive).
bool fitted_refit(const LowBitForm& rule, const float* v, const float* t, float d, float* sc,
                  float* z) {
  float st = 0.0f, stt = 0.0f, sv = 0.0f, stv = 0.0f;
  for (int64_t k = 0; k < kQuantBlock; ++k) {
    st = st + t[k];
    stt = stt + t[k] * t[k];
    sv = sv + v[k];
    stv = stv + t[k] * v[k];
  }
  const float n = static_cast<float>(kQuantBlock), det = n * stt - st * st;
  if (!(det > 0.0f)) return false;
  const float a = (n * stv - st * sv) / det, c = (sv - a * st) / n;
  if (!(a > 0.0f)) return false;
  *sc = std::min(255.0f, std::max(1.0f, std::nearbyint(a / d)));
  *z = clamp_zero(std::nearbyint(rule.unit() * c / (d * *sc)));
  return true;
}

struct FittedChoice {
  float sc = 0.0f, z = 0.0f, err = INFINITY;
  void consider(const LowBitForm& rule, const float* v, float d, float sc_, float z_, float* t) {
    const float e = fitted_fit(rule, v, d, sc_, z_, t);
    if (e < err) *this = {sc_, z_, e};
  }
};

// One block's (sc, z) by the search of gemm_int8.h; r is its range estimate.
FittedChoice fitted_search(const LowBitForm& rule, const float* v, float lo, float hi, float r,
                           float d) {
  const float sc0 = std::min(255.0f, std::max(1.0f, std::nearbyint(r / d)));
  const float shrink[] = {1.0f, 0.98f, 0.96f};
  FittedChoice best;
  float t[kQuantBlock];
  for (float f : shrink) {
    const float sc = std::min(255.0f, std::max(1.0f, std::nearbyint(sc0 * f)));
    const float z0 = std::nearbyint(rule.unit() * ((lo + hi) / (2.0f * (d * sc)) + 0.5f));
    for (float dz : {-1.0f, 0.0f, 1.0f}) {
      const float z = clamp_zero(z0 + dz);
      best.consider(rule, v, d, sc, z, t);
      float sc2, z2;
      if (fitted_refit(rule, v, t, d, &sc2, &z2)) best.consider(rule, v, d, sc2, z2, t);
    }
  }
  return best;
}

// One block's stored bytes: the low nibbles of t (k = 2i low, 2i + 1 high), for q5z the word of
// the fifth bits, then sc and z.
void store_fitted_block(const LowBitForm& rule, const float* t, float sc, float z, uint8_t* qb) {
  uint32_t fifth = 0;
  for (int64_t k = 0; k < kQuantBlock; ++k) {
    const int ti = static_cast<int>(t[k]);
    const auto nib = static_cast<uint8_t>(ti & 0xf);
    qb[k / 2] |= static_cast<uint8_t>(k % 2 == 0 ? nib : nib << 4);
    fifth |= static_cast<uint32_t>((ti >> 4) & 1) << k;
  }
  int64_t at = kPairs;
  if (rule.fifth())
    for (int k = 0; k < 4; ++k) qb[at++] = static_cast<uint8_t>(fifth >> (8 * k));
  qb[at] = static_cast<uint8_t>(sc);
  qb[at + 1] = static_cast<uint8_t>(static_cast<int8_t>(z));
}

bool quantize_row_fitted(const LowBitForm& rule, const float* v, int64_t n, uint8_t* q,
                         uint16_t* scale) {
  const int64_t blocks = (n + kQuantBlock - 1) / kQuantBlock;
  std::vector<float> pad(static_cast<size_t>(blocks * kQuantBlock), 0.0f);
  std::copy(v, v + n, pad.begin());
  for (float x : pad)
    if (!std::isfinite(x)) return false;
  std::vector<float> lo_v(static_cast<size_t>(blocks)), hi_v(lo_v.size()), r_v(lo_v.size());
  float *lo = lo_v.data(), *hi = hi_v.data(), *r = r_v.data();
  for (int64_t b = 0; b < blocks; ++b) {
    const float* vb = pad.data() + b * kQuantBlock;
    float l = vb[0], h = vb[0];
    for (int64_t k = 1; k < kQuantBlock; ++k) {
      l = std::min(l, vb[k]);
      h = std::max(h, vb[k]);
    }
    lo[b] = l;
    hi[b] = h;
    r[b] = std::max((h - l) / rule.span(), std::max(-l, h) / rule.guard());
  }
  for (int64_t sb = 0; sb * kFittedSuperBlock < blocks; ++sb) {
    const int64_t b0 = sb * kFittedSuperBlock, b1 = std::min(blocks, b0 + kFittedSuperBlock);
    float rmax = 0.0f;
    for (int64_t b = b0; b < b1; ++b) rmax = std::max(rmax, r[b]);
    const uint16_t d16 = f32_to_f16(rmax / 255.0f);
    if ((d16 & 0x7c00u) == 0x7c00u) return false;
    const float d = f16_to_f32(d16);
    scale[sb] = d16;
    for (int64_t b = b0; b < b1; ++b) {
      uint8_t* qb = q + b * rule.block_bytes();
      std::fill(qb, qb + rule.block_bytes(), uint8_t{0});
      if (d == 0.0f) continue;  // the super-block rounds to zero: zeros, sc = z = 0
      const float* vb = pad.data() + b * kQuantBlock;
      const FittedChoice c = fitted_search(rule, vb, lo[b], hi[b], r[b], d);
      float t[kQuantBlock];
      fitted_fit(rule, vb, d, c.sc, c.z, t);
      store_fitted_block(rule, t, c.sc, c.z, qb);
    }
  }
  return true;
}

}  // namespace

bool quantize_row_q4z(const float* v, int64_t n, uint8_t* q, uint16_t* super_scale) {
  return quantize_row_fitted(kQ4zForm, v, n, q, super_scale);
}

bool quantize_row_q5z(const float* v, int64_t n, uint8_t* q, uint16_t* super_scale) {
  return quantize_row_fitted(kQ5zForm, v, n, q, super_scale);
}

namespace {

// The packed shape of a [rows, cols] matrix (Int8Matrix / Int4Matrix share it).
template <typename M>
void set_packed_shape(M& m, int64_t rows, int64_t cols) {
  m.rows = rows;
  m.cols = cols;
  m.blocks = (cols + kQuantBlock - 1) / kQuantBlock;
  m.groups = (rows + kGroup - 1) / kGroup;
}

// Calls fn(g, j, r, b) for every stored row r = g * 16 + j and block b, the groups on threads.
template <typename Fn>
void for_each_row_block(int64_t rows, int64_t blocks, size_t threads, const Fn& fn) {
  const int64_t groups = (rows + kGroup - 1) / kGroup;
  parallel_for(
      static_cast<size_t>(groups),
      [&](size_t gi) {
        const int64_t g = static_cast<int64_t>(gi);
        for (int64_t j = 0; j < kGroup && g * kGroup + j < rows; ++j)
          for (int64_t b = 0; b < blocks; ++b) fn(g, j, g * kGroup + j, b);
      },
      threads == 0 ? default_workers() : threads);
}

}  // namespace

Int8Matrix pack_q8_rows(const void* q_rows, const void* scale_rows, int64_t rows, int64_t cols,
                        size_t threads) {
  Int8Matrix m;
  set_packed_shape(m, rows, cols);
  m.q = ZeroedBuffer<int8_t>(static_cast<size_t>(m.groups * kGroup * m.blocks * kQuantBlock));
  m.scale = ZeroedBuffer<float>(static_cast<size_t>(m.groups * m.blocks * kGroup));
  const auto* qs = static_cast<const int8_t*>(q_rows);
  const auto* ss = static_cast<const uint8_t*>(scale_rows);
  const int64_t kp = m.blocks * kQuantBlock;
  for_each_row_block(rows, m.blocks, threads, [&](int64_t g, int64_t j, int64_t r, int64_t b) {
    float sc;
    std::memcpy(&sc, ss + 4 * (r * m.blocks + b), 4);  // may be unaligned
    m.scale[static_cast<size_t>((g * m.blocks + b) * kGroup + j)] = sc;
    const int8_t* src = qs + r * kp + b * kQuantBlock;
    int8_t* dst = m.q.data() + int8_layout::packed_offset(m.blocks, g, j, b * kQuantBlock);
    for (int64_t p = 0; p < kPairs; ++p) {
      dst[p * kGroup * 2] = src[2 * p];
      dst[p * kGroup * 2 + 1] = src[2 * p + 1];
    }
  });
  return m;
}

namespace {

// Stored rows of one low-bit form into Int4Matrix's layout.
Int4Matrix pack_low_bit_rows(const void* q_rows, const void* scale_rows, int64_t rows, int64_t cols,
                             const LowBitForm& form, size_t threads) {
  Int4Matrix m;
  set_packed_shape(m, rows, cols);
  const int64_t supers = (m.blocks + kFittedSuperBlock - 1) / kFittedSuperBlock;
  m.q = ZeroedBuffer<uint8_t>(static_cast<size_t>(m.groups * m.blocks * kPairs * kGroup));
  if (form.fifth())
    m.high = ZeroedBuffer<uint32_t>(static_cast<size_t>(m.groups * m.blocks * kGroup));
  m.scale = ZeroedBuffer<uint16_t>(static_cast<size_t>(m.groups * m.blocks * kGroup));
  if (form.fitted())
    m.super = ZeroedBuffer<uint16_t>(static_cast<size_t>(m.groups * supers * kGroup));
  const auto* qs = static_cast<const uint8_t*>(q_rows);
  const auto* ss = static_cast<const uint8_t*>(scale_rows);
  const int64_t row_bytes = m.blocks * form.block_bytes();
  const int64_t tail = form.block_bytes() - 2;  // a fitted block's sc, then z
  for_each_row_block(rows, m.blocks, threads, [&](int64_t g, int64_t j, int64_t r, int64_t b) {
    const uint8_t* src = qs + r * row_bytes + b * form.block_bytes();
    const size_t at = static_cast<size_t>((g * m.blocks + b) * kGroup + j);
    // A stored byte is one pair of k: it goes where Int8Matrix keeps that pair.
    for (int64_t p = 0; p < kPairs; ++p)
      m.q[static_cast<size_t>(((g * m.blocks + b) * kPairs + p) * kGroup + j)] = src[p];
    if (form.fifth())
      for (int k = 0; k < 4; ++k) m.high[at] |= static_cast<uint32_t>(src[kPairs + k]) << (8 * k);
    if (!form.fitted()) {
      std::memcpy(&m.scale[at], ss + 2 * (r * m.blocks + b), 2);  // may be unaligned
      return;
    }
    m.scale[at] = static_cast<uint16_t>(src[tail] | src[tail + 1] << 8);
    if (b % kFittedSuperBlock == 0) {
      const int64_t sb = b / kFittedSuperBlock;
      std::memcpy(&m.super[static_cast<size_t>((g * supers + sb) * kGroup + j)],
                  ss + 2 * (r * supers + sb), 2);
    }
  });
  return m;
}

}  // namespace

Int4Matrix pack_q4_rows(const void* q_rows, const void* scale_rows, int64_t rows, int64_t cols,
                        size_t threads) {
  return pack_low_bit_rows(q_rows, scale_rows, rows, cols, kQ4Form, threads);
}

Int4Matrix pack_q5_rows(const void* q_rows, const void* scale_rows, int64_t rows, int64_t cols,
                        size_t threads) {
  return pack_low_bit_rows(q_rows, scale_rows, rows, cols, kQ5Form, threads);
}

Int4Matrix pack_q4z_rows(const void* q_rows, const void* scale_rows, int64_t rows, int64_t cols,
                         size_t threads) {
  return pack_low_bit_rows(q_rows, scale_rows, rows, cols, kQ4zForm, threads);
}

Int4Matrix pack_q5z_rows(const void* q_rows, const void* scale_rows, int64_t rows, int64_t cols,
                         size_t threads) {
  return pack_low_bit_rows(q_rows, scale_rows, rows, cols, kQ5zForm, threads);
}

Isa best_int8_isa() {
  return model_kernels().int8_isa();
}

void gemm_int8_isa(Isa isa, const float* x, int64_t rows, int64_t ldx, const Int8Matrix& w,
                   float* y, int64_t ldy, size_t threads, ActivationWidth width) {
  if (!isa_supported(isa))
    fail(ErrorKind::kUnsupported, "this CPU cannot run the {} int8 kernels", isa_name(isa));
  gemm_int8_kernel(int8_kernel_for(isa, width), x, rows, ldx, w, y, ldy, threads, width);
}

void gemm_int8_kernel(Int8Kernel k, const float* x, int64_t rows, int64_t ldx, const Int8Matrix& w,
                      float* y, int64_t ldy, size_t threads, ActivationWidth width) {
  over_groups(k, width, x, rows, ldx, w, threads,
              [&](const KernelRange& range, const QuantRows& a, int64_t g0, int64_t g1) {
                range(a, rows, w, y, ldy, g0, g1);
              });
}

namespace {

// q4z / q5z: the widened values t of groups [g0, g0 + n) become unit t + z (unit 8 for q4z, 4
// for q5z, the one with fifth bits), and each block's scale f16(d) * sc / unit (exact in FP32).
void widen_fitted_zeros(const Int4Matrix& w, int64_t g0, int64_t n, int8_t* values, float* scales) {
  const int64_t supers = (w.blocks + kFittedSuperBlock - 1) / kFittedSuperBlock;
  const int unit = w.high.empty() ? 8 : 4;
  const float inv = w.high.empty() ? 0.125f : 0.25f;
  for (int64_t gi = 0; gi < n; ++gi)
    for (int64_t b = 0; b < w.blocks; ++b)
      for (int64_t j = 0; j < kGroup; ++j) {
        const int64_t g = g0 + gi, at = (g * w.blocks + b) * kGroup + j;
        const uint16_t packed = w.scale[static_cast<size_t>(at)];
        const float d = f16_to_f32(
            w.super[static_cast<size_t>((g * supers + b / kFittedSuperBlock) * kGroup + j)]);
        const auto z = static_cast<int8_t>(packed >> 8);
        scales[(gi * w.blocks + b) * kGroup + j] = d * static_cast<float>(packed & 0xff) * inv;
        int8_t* blk = values + ((gi * w.blocks + b) * kPairs * kGroup) * 2;
        for (int64_t p = 0; p < kPairs; ++p)
          for (int e = 0; e < 2; ++e) {
            int8_t& v = blk[(p * kGroup + j) * 2 + e];
            v = static_cast<int8_t>(unit * v + z);
          }
      }
}

// Groups [g0, g1) of a q4, q5, q4z or q5z matrix as an Int8Matrix of their own (byte i of the
// packed data becomes int8 2i, its low nibble, and 2i + 1, its high nibble: Int8Matrix's order),
// then the int8 kernel's range over them, writing their rows of y.
void widen_and_run(const KernelRange& range, const QuantRows& a, int64_t rows, const Int4Matrix& w,
                   int64_t g0, int64_t g1, float* y, int64_t ldy) {
  const int64_t group_bytes = w.blocks * kPairs * kGroup;
  const int64_t group_scales = w.blocks * kGroup;
  thread_local Int8Matrix chunk;
  const int64_t n = g1 - g0;
  chunk.rows = std::min(w.rows, g1 * kGroup) - g0 * kGroup;
  chunk.cols = w.cols;
  chunk.blocks = w.blocks;
  chunk.groups = n;
  chunk.q.resize_for_overwrite(static_cast<size_t>(n * group_bytes * 2));  // written whole below
  chunk.scale.resize_for_overwrite(static_cast<size_t>(n * group_scales));
  const uint8_t* src = w.q.data() + g0 * group_bytes;
  int8_t* dst = chunk.q.data();
  if (w.high.empty()) {
    for (int64_t i = 0; i < n * group_bytes; ++i) {
      const uint8_t b = src[i];
      dst[2 * i] = static_cast<int8_t>(static_cast<int8_t>(b << 4) >> 4);
      dst[2 * i + 1] = static_cast<int8_t>(static_cast<int8_t>(b) >> 4);
    }
  } else {
    // q5 / q5z: the fifth bit of k = 2p and 2p + 1 from the row's word of its block, then the 5-bit
    // value sign-extended.
    const uint32_t* high = w.high.data() + g0 * group_scales;
    for (int64_t gb = 0; gb < n * w.blocks; ++gb)
      for (int64_t p = 0; p < kPairs; ++p)
        for (int64_t j = 0; j < kGroup; ++j) {
          const int64_t i = (gb * kPairs + p) * kGroup + j;
          const uint32_t h = high[gb * kGroup + j] >> (2 * p);
          const auto v0 = static_cast<uint8_t>((src[i] & 0xf) | ((h & 1) << 4));
          const auto v1 = static_cast<uint8_t>((src[i] >> 4) | ((h & 2) << 3));
          dst[2 * i] = static_cast<int8_t>(static_cast<int8_t>(v0 << 3) >> 3);
          dst[2 * i + 1] = static_cast<int8_t>(static_cast<int8_t>(v1 << 3) >> 3);
        }
  }
  const uint16_t* ss = w.scale.data() + g0 * group_scales;
  if (w.super.empty()) {
    for (int64_t i = 0; i < n * group_scales; ++i)
      chunk.scale[static_cast<size_t>(i)] = f16_to_f32(ss[i]);
  } else {
    widen_fitted_zeros(w, g0, n, dst, chunk.scale.data());
  }
  range(a, rows, chunk, y + g0 * kGroup, ldy, 0, n);
}

}  // namespace

void gemm_int4_kernel(Int8Kernel k, const float* x, int64_t rows, int64_t ldx, const Int4Matrix& w,
                      float* y, int64_t ldy, size_t threads, ActivationWidth width) {
  // Each worker widens its own chunk of groups whole: widening a few groups at a time (256 KiB
  // or 1 MiB of int8 values) measured no faster at Kev-27B's dimensions and saved 23 MB.
  over_groups(k, width, x, rows, ldx, w, threads,
              [&](const KernelRange& range, const QuantRows& a, int64_t g0, int64_t g1) {
                widen_and_run(range, a, rows, w, g0, g1, y, ldy);
              });
}

void gemm_int8(const float* x, int64_t rows, int64_t ldx, const Int8Matrix& w, float* y,
               int64_t ldy, size_t threads, ActivationWidth width) {
  gemm_int8_kernel(best_int8_kernel(width), x, rows, ldx, w, y, ldy, threads, width);
}

}  // namespace kev
