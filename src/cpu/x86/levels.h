// The x86-64 family's levels, their ranks (kev::Isa) as registered in features.cpp, lowest first,
// and the CPU checks of the extensions its kernels use.
// Private to this folder; the rest of the code base knows them by name only (isa.h).
#pragma once
#include "kev/cpu/isa.h"

namespace kev::arch {

inline constexpr Isa kAvx2 = Isa::of_rank(1);    // AVX2 + FMA
inline constexpr Isa kAvx512 = Isa::of_rank(2);  // AVX-512 F/BW/VL + FMA

// AVX-VNNI (ymm vpdpbusd, VEX-encoded) on top of kAvx2 (false without kAvx2).
bool cpu_has_avx_vnni();
// Extensions on top of kAvx512 that the precision-mode kernels use (false without kAvx512).
bool cpu_has_avx512_vnni();  // AVX512_VNNI: vpdpwssd
bool cpu_has_avx512_bf16();  // AVX512_BF16: vdpbf16ps
// AMX-TILE + AMX-INT8 (tdpbssd, tdpbusd), and Linux granted this process the tile state (the
// first call asks, once: arch_prctl ARCH_REQ_XCOMP_PERM); false elsewhere.
bool cpu_has_amx_int8();
bool cpu_has_amx_bf16();  // AMX-TILE + AMX-BF16 (tdpbf16ps), the same way

}  // namespace kev::arch
