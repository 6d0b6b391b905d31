// The AMX tile operations the AMX kernel bodies are written against
// (src/cpu/bodies/tile_amx_int8.inc, tile_amx_bf16.inc), in plain C++ after each instruction's
// documented semantics (Intel SDM: LDTILECFG, TILELOADD, TILESTORED, TILEZERO, TDPBSSD, TDPBUSD,
// TDPBF16PS): the kernel's exact code path on any CPU, as avx512_emu_ops.h is for the AVX-512
// kernels. The instructions themselves are src/cpu/x86/amx_ops.h; tests check each operation here
// against a scalar reference, and on AMX machines the real kernel against this one. State: the
// eight tile registers and their shapes live in this thread's storage, as the real ones are per
// thread. A tile is up to 16 rows of up to 64 bytes.
#pragma once
#include <cmath>
#include <cstdint>
#include <cstring>

namespace kev::amx {

struct EmuTileOps {
  struct Tile {
    uint8_t bytes[16][64];
    int rows = 0, colsb = 0;
  };
  static Tile* tiles() {
    thread_local Tile t[8];
    return t;
  }

  // LDTILECFG (palette 1): byte 0 the palette, bytes 16 + 2t the bytes per row of tile t (uint16),
  // byte 48 + t its rows. Loading a configuration zeroes every tile.
  static void config(const uint8_t* cfg) {
    for (int t = 0; t < 8; ++t) {
      Tile& tile = tiles()[t];
      uint16_t colsb;
      std::memcpy(&colsb, cfg + 16 + 2 * t, 2);
      tile.colsb = colsb;
      tile.rows = cfg[48 + t];
      std::memset(tile.bytes, 0, sizeof tile.bytes);
    }
  }
  static void release() {
    for (int t = 0; t < 8; ++t) tiles()[t] = Tile{};
  }
  template <int T>
  static void zero() {
    std::memset(tiles()[T].bytes, 0, sizeof tiles()[T].bytes);
  }
  // TILELOADD: row r from base + r * stride, colsb bytes each; the rest of the tile zeroed.
  template <int T>
  static void load(const void* base, int64_t stride) {
    Tile& tile = tiles()[T];
    std::memset(tile.bytes, 0, sizeof tile.bytes);
    for (int r = 0; r < tile.rows; ++r)
      std::memcpy(tile.bytes[r], static_cast<const uint8_t*>(base) + r * stride,
                  static_cast<size_t>(tile.colsb));
  }
  // TILESTORED: rows x colsb bytes to base + r * stride.
  template <int T>
  static void store(void* base, int64_t stride) {
    const Tile& tile = tiles()[T];
    for (int r = 0; r < tile.rows; ++r)
      std::memcpy(static_cast<uint8_t*>(base) + r * stride, tile.bytes[r],
                  static_cast<size_t>(tile.colsb));
  }
  // TDPB[SU]SD C, A, B: for each row m of C and dword n of its rows,
  // C[m][n] += sum over k < colsb(A) / 4 and i < 4 of A[m][4k + i] * B[k][4n + i], A's bytes
  // signed (SSD) or unsigned (USD), B's signed, wrapping modulo 2^32.
  template <int C, int A, int B, bool kUnsignedA>
  static void dp() {
    Tile &c = tiles()[C], &a = tiles()[A], &b = tiles()[B];
    for (int m = 0; m < c.rows; ++m)
      for (int n = 0; n < c.colsb / 4; ++n) {
        uint32_t acc;
        std::memcpy(&acc, c.bytes[m] + 4 * n, 4);
        for (int k = 0; k < a.colsb / 4; ++k)
          for (int i = 0; i < 4; ++i) {
            const int32_t av = kUnsignedA ? int32_t{a.bytes[m][4 * k + i]}
                                          : int32_t{static_cast<int8_t>(a.bytes[m][4 * k + i])};
            acc += static_cast<uint32_t>(av * static_cast<int8_t>(b.bytes[k][4 * n + i]));
          }
        std::memcpy(c.bytes[m] + 4 * n, &acc, 4);
      }
  }
  template <int C, int A, int B>
  static void dpbssd() {
    dp<C, A, B, false>();
  }
  template <int C, int A, int B>
  static void dpbusd() {
    dp<C, A, B, true>();
  }

  // TDPBF16PS C, A, B (FP32 C; A and B dwords are BF16 pairs, element 2i in the low half): for
  // each row m of C and dword n, an even and an odd FP32 sum, each starting at 0 and taking, for
  // k = 0, 1, ... < colsb(A) / 4, one FMA (A[m].bf16[2k + e] * B[k].bf16[2n + e] + sum);
  // then C[m][n] + (even + odd). Every FMA and addition rounds to nearest even, reads denormal
  // inputs as zero and flushes denormal results to zero; MXCSR is ignored. The SDM states the
  // even/odd sums and the rounding; the order of the final two additions is what an AMX-BF16
  // CPU computed, bit for bit, on 51,200 random outputs (test_gemm_amx checks the real
  // instruction against this wherever it runs).
  static float daz(float v) {
    return std::fpclassify(v) == FP_SUBNORMAL ? std::copysign(0.0f, v) : v;
  }
  static float bf16_at(const uint8_t* p) {
    uint32_t u = uint32_t{p[0]} << 16 | uint32_t{p[1]} << 24;
    float f;
    std::memcpy(&f, &u, 4);
    return daz(f);
  }
  static float fma_z(float a, float b, float c) { return daz(std::fma(a, b, daz(c))); }
  static float add_z(float a, float b) { return daz(daz(a) + daz(b)); }
  template <int C, int A, int B>
  static void dpbf16ps() {
    Tile &c = tiles()[C], &a = tiles()[A], &b = tiles()[B];
    for (int m = 0; m < c.rows; ++m)
      for (int n = 0; n < c.colsb / 4; ++n) {
        float even = 0.0f, odd = 0.0f, acc;
        for (int k = 0; k < a.colsb / 4; ++k) {
          even = fma_z(bf16_at(a.bytes[m] + 4 * k), bf16_at(b.bytes[k] + 4 * n), even);
          odd = fma_z(bf16_at(a.bytes[m] + 4 * k + 2), bf16_at(b.bytes[k] + 4 * n + 2), odd);
        }
        std::memcpy(&acc, c.bytes[m] + 4 * n, 4);
        acc = add_z(acc, add_z(even, odd));
        std::memcpy(c.bytes[m] + 4 * n, &acc, 4);
      }
  }
};

}  // namespace kev::amx
