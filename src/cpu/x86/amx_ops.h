// The AMX tile operations of the AMX kernels (src/cpu/bodies/tile_amx_int8.inc, tile_amx_bf16.inc)
// as the instructions themselves (inline assembly: a tile register is named by a constant, so each
// operation takes its tiles as template arguments). Only ever run after cpu_has_amx_int8() or
// cpu_has_amx_bf16() (x86/levels.h), which also asked Linux for the tile state. The same operations
// in plain C++ (the emulation every machine tests with) are src/cpu/portable/amx_emu_ops.h.
#pragma once
#include <cstdint>

namespace kev::amx {

struct AmxTileOps {
  static inline void config(const uint8_t* cfg) {
    __asm__ volatile("ldtilecfg %0" : : "m"(*reinterpret_cast<const uint8_t(*)[64]>(cfg)));
  }
  static inline void release() { __asm__ volatile("tilerelease" ::: "memory"); }
  template <int T>
  static inline void zero() {
    __asm__ volatile("tilezero %%tmm%c0" : : "i"(T));
  }
  template <int T>
  static inline void load(const void* base, int64_t stride) {
    __asm__ volatile("tileloadd (%0,%1,1), %%tmm%c2" : : "r"(base), "r"(stride), "i"(T) : "memory");
  }
  template <int T>
  static inline void store(void* base, int64_t stride) {
    __asm__ volatile("tilestored %%tmm%c2, (%0,%1,1)"
                     :
                     : "r"(base), "r"(stride), "i"(T)
                     : "memory");
  }
  // AT&T order: B, A, C for Intel's C, A, B.
  template <int C, int A, int B>
  static inline void dpbssd() {
    __asm__ volatile("tdpbssd %%tmm%c2, %%tmm%c1, %%tmm%c0" : : "i"(C), "i"(A), "i"(B));
  }
  template <int C, int A, int B>
  static inline void dpbusd() {
    __asm__ volatile("tdpbusd %%tmm%c2, %%tmm%c1, %%tmm%c0" : : "i"(C), "i"(A), "i"(B));
  }
  // AMX-BF16: only after cpu_has_amx_bf16().
  template <int C, int A, int B>
  static inline void dpbf16ps() {
    __asm__ volatile("tdpbf16ps %%tmm%c2, %%tmm%c1, %%tmm%c0" : : "i"(C), "i"(A), "i"(B));
  }
};

}  // namespace kev::amx
