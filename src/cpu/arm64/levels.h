// The aarch64 family's levels: their ranks (kev::Isa) as registered in features.cpp, lowest
// first. Private to this folder; the rest of the code base knows them by name only (isa.h).
#pragma once
#include "kev/cpu/isa.h"

namespace kev::arch {

inline constexpr Isa kNeon = Isa::of_rank(1);  // Advanced SIMD

// The SDOT / UDOT extension (HWCAP_ASIMDDP; ARMv8.2-A's optional dotprod).
bool cpu_has_dotprod();

}  // namespace kev::arch
