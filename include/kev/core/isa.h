// Instruction-set levels of the runtime-dispatched kernels (GEMM, LoRA merge, pointer head).
//
// Contract: every kernel family has a portable, an AVX2+FMA and an AVX-512 variant that give
// bit-identical results (each states its fixed order of operations), so the level changes speed
// only, never a number or a byte of a bundle. The runtime picks the best level this CPU supports
// (CPUID via __builtin_cpu_supports, once per process). Environment variables may lower it, for
// tests and benchmarks that exercise another machine's path:
//   KEV_ISA=portable|avx2|avx512          caps every family;
//   KEV_GEMM_ISA, KEV_MERGE_ISA, KEV_HEAD_ISA  cap one family (and win over KEV_ISA).
// "scalar" is accepted for "portable". A cap above what the CPU supports falls back to the best
// supported level (never an illegal instruction); an unknown value is refused (Error, bad input).
// Thread safety: every function may be called from any thread.
#pragma once
#include <optional>
#include <string_view>
#include <vector>

namespace kev {

enum class Isa { kPortable, kAvx2, kAvx512 };

// kAvx2 needs AVX2 + FMA; kAvx512 needs AVX-512 F/BW/VL + FMA. kPortable always runs.
bool isa_supported(Isa isa);
std::vector<Isa> supported_isas();  // every level isa_supported reports, lowest first
const char* isa_name(Isa isa);      // "portable", "avx2", "avx512"
std::optional<Isa> parse_isa(std::string_view name);  // nullopt if unknown
Isa best_supported_isa();                             // ignores the environment
Isa dispatch_isa(const char* family_env);  // best_supported_isa() capped by KEV_ISA / family_env

// Extensions on top of kAvx512 that the precision-mode kernels use when present
// (gemm_avx512.h). CPUID only: a kernel that needs one also needs kAvx512 from dispatch_isa, so
// KEV_ISA=avx2 still turns it off.
bool cpu_has_avx512_vnni();  // AVX512_VNNI: vpdpwssd
bool cpu_has_avx512_bf16();  // AVX512_BF16: vdpbf16ps

// Refuses (Error, bad input) an unknown value in any of the variables above, so a typo fails at
// start-up with one sentence rather than at a kernel's first call.
void check_isa_environment();

}  // namespace kev
