// Instruction-set levels of the runtime-dispatched kernels (model GEMMs and vector kernels, LoRA
// merge, pointer head): a registry filled by the CPU family folder this binary is built with
// (src/cpu/arch.h). This layer names no instruction set: a level is its rank in the family's
// order, its name is what the family registered (x86-64: portable, avx2, avx512; aarch64:
// portable, neon; other targets: portable).
//
// Contract: every kernel family has a portable variant and may have one per level of the CPU
// family, all giving bit-identical results (each kernel family states its fixed order of
// operations), so the level changes speed only, never a number or a byte of a bundle. Levels are
// ordered (arch_isas(), lowest first, portable first). The runtime picks the best level this CPU
// supports (the family's checks, once per process). Environment variables may lower it, for
// tests and benchmarks that exercise another machine's path:
//   KEV_ISA=<level>                               caps every family;
//   KEV_GEMM_ISA, KEV_MERGE_ISA, KEV_HEAD_ISA     cap one family (and win over KEV_ISA).
// "scalar" is accepted for "portable". A cap above what the CPU supports falls back to the best
// supported level (never an illegal instruction); a name that is not a level of this build (a
// typo, or another architecture's level such as avx2 on aarch64) is refused (Error, bad input).
// Thread safety: every function may be called from any thread.
#pragma once
#include <compare>
#include <optional>
#include <span>
#include <string_view>
#include <vector>

namespace kev {

// A level of this build: its rank in arch_isas() (0: portable). Only the family folder makes
// other ranks (Isa::of_rank); everyone else gets levels from the functions below.
class Isa {
 public:
  static const Isa kPortable;  // rank 0, in every build, run by every CPU
  constexpr Isa() = default;   // kPortable
  static constexpr Isa of_rank(int rank) { return Isa(rank); }
  constexpr int rank() const { return rank_; }
  constexpr auto operator<=>(const Isa&) const = default;

 private:
  constexpr explicit Isa(int rank) : rank_(rank) {}
  int rank_ = 0;
};
inline constexpr Isa Isa::kPortable{};

const char* arch_name();           // "x86-64", "aarch64" or "other": what this binary targets
std::span<const Isa> arch_isas();  // this build's levels, lowest first (kPortable first)

bool isa_supported(Isa isa);        // the CPU runs it (kPortable always; a foreign rank never)
std::vector<Isa> supported_isas();  // every level isa_supported reports, lowest first
const char* isa_name(Isa isa);      // as the family registered it ("avx2"); "?" for no level
std::optional<Isa> parse_isa(std::string_view name);  // a level of this build, or nullopt
Isa best_supported_isa();                             // ignores the environment
Isa dispatch_isa(const char* family_env);  // best_supported_isa() capped by KEV_ISA / family_env

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
