// Instruction-set levels of the runtime-dispatched kernels (model GEMMs and vector kernels, LoRA
// merge, pointer head), per target architecture.
//
// Contract: every kernel family has a portable variant and one per level of the architecture it
// is built for (x86-64: avx2 = AVX2+FMA, avx512 = AVX-512 F/BW/VL; aarch64: neon = Advanced
// SIMD, with room for sve), all giving bit-identical results (each family states its fixed order
// of operations), so the level changes speed only, never a number or a byte of a bundle, on any
// architecture. The levels of one architecture are ordered (arch_isas(), lowest first); levels of
// another architecture do not exist in this build. The runtime picks the best level this CPU
// supports (CPUID / HWCAP, once per process, in the CPU family's folder: src/cpu/arch.h).
// Environment variables may lower it, for tests and benchmarks that exercise another machine's
// path:
//   KEV_ISA=<level>                               caps every family;
//   KEV_GEMM_ISA, KEV_MERGE_ISA, KEV_HEAD_ISA     cap one family (and win over KEV_ISA).
// "scalar" is accepted for "portable". A cap above what the CPU supports falls back to the best
// supported level (never an illegal instruction); an unknown value, or a level of another
// architecture (avx2 on aarch64), is refused (Error, bad input).
// Thread safety: every function may be called from any thread.
#pragma once
#include <optional>
#include <span>
#include <string_view>
#include <vector>

namespace kev {

enum class Isa { kPortable, kAvx2, kAvx512, kNeon };

const char* arch_name();           // "x86-64", "aarch64" or "other": what this binary targets
std::span<const Isa> arch_isas();  // this architecture's levels, lowest first (kPortable first)

// kAvx2 needs AVX2 + FMA; kAvx512 needs AVX-512 F/BW/VL + FMA; kNeon needs ASIMD (HWCAP).
// kPortable always runs; a level of another architecture never does.
bool isa_supported(Isa isa);
std::vector<Isa> supported_isas();  // every level isa_supported reports, lowest first
const char* isa_name(Isa isa);      // "portable", "avx2", "avx512", "neon"
std::optional<Isa> parse_isa(std::string_view name);  // nullopt if unknown (any architecture)
Isa best_supported_isa();                             // ignores the environment
Isa dispatch_isa(const char* family_env);  // best_supported_isa() capped by KEV_ISA / family_env

// Extensions on top of kAvx512 that the precision-mode kernels use when present
// (gemm_avx512.h). CPUID only: a kernel that needs one also needs kAvx512 from dispatch_isa, so
// KEV_ISA=avx2 still turns it off. False on other architectures.
bool cpu_has_avx512_vnni();  // AVX512_VNNI: vpdpwssd
bool cpu_has_avx512_bf16();  // AVX512_BF16: vdpbf16ps
// The extensions the CPU family folder reports beside its levels (`kev cpu`'s "supported":
// x86-64 avx512_vnni, avx512_bf16; aarch64 dotprod, sve; none on other targets), in its order.
struct CpuExtension {
  const char* name;
  bool present;
};
std::vector<CpuExtension> cpu_extensions();

// Refuses (Error, bad input) an unknown value in any of the variables above, so a typo fails at
// start-up with one sentence rather than at a kernel's first call.
void check_isa_environment();

}  // namespace kev
