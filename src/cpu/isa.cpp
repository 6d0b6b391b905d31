#include "kev/cpu/isa.h"

#include <algorithm>
#include <cstdlib>
#include <string>
#include <vector>

#include "cpu/arch.h"
#include "kev/core/error.h"

namespace kev {

namespace {

// Position of `isa` in this architecture's order, or -1 if it is not one of its levels.
int rank(Isa isa) {
  const std::span<const Isa> levels = arch::levels();
  auto it = std::find(levels.begin(), levels.end(), isa);
  return it == levels.end() ? -1 : static_cast<int>(it - levels.begin());
}

std::string level_list() {
  std::string out;
  for (Isa isa : arch::levels()) out += std::string(out.empty() ? "" : ", ") + isa_name(isa);
  return out;
}

// The cap an environment variable asks for, or nullopt when it is unset or empty.
std::optional<Isa> env_cap(const char* variable) {
  const char* value = std::getenv(variable);
  if (value == nullptr || *value == '\0') return std::nullopt;
  std::optional<Isa> isa = parse_isa(value);
  if (!isa)
    fail(ErrorKind::kBadInput, "{}={}: expected portable (or scalar), avx2, avx512 or neon",
         variable, value);
  if (rank(*isa) < 0)
    fail(ErrorKind::kBadInput, "{}={}: not a level of this {} build (its levels: {})", variable,
         value, arch::name(), level_list());
  return isa;
}

}  // namespace

const char* arch_name() {
  return arch::name();
}

std::span<const Isa> arch_isas() {
  return arch::levels();
}

bool isa_supported(Isa isa) {
  // The CPU check of each level runs once per process (arch.h's contract), in rank order.
  static const std::vector<bool> by_rank = [] {
    std::vector<bool> out;
    for (Isa level : arch::levels()) out.push_back(arch::supports(level));
    return out;
  }();
  const int r = rank(isa);
  return isa == Isa::kPortable || (r >= 0 && by_rank[static_cast<size_t>(r)]);
}

std::vector<Isa> supported_isas() {
  std::vector<Isa> out;
  for (Isa isa : arch::levels())
    if (isa_supported(isa)) out.push_back(isa);
  return out;
}

const char* isa_name(Isa isa) {
  switch (isa) {
    case Isa::kAvx512:
      return "avx512";
    case Isa::kAvx2:
      return "avx2";
    case Isa::kNeon:
      return "neon";
    default:
      return "portable";
  }
}

std::optional<Isa> parse_isa(std::string_view name) {
  if (name == "portable" || name == "scalar") return Isa::kPortable;
  if (name == "avx2") return Isa::kAvx2;
  if (name == "avx512") return Isa::kAvx512;
  if (name == "neon") return Isa::kNeon;
  return std::nullopt;
}

Isa best_supported_isa() {
  return supported_isas().back();
}

Isa dispatch_isa(const char* family_env) {
  std::optional<Isa> cap = env_cap(family_env);
  if (!cap) cap = env_cap("KEV_ISA");
  Isa best = best_supported_isa();
  if (!cap) return best;
  return rank(*cap) < rank(best) ? *cap : best;
}

bool cpu_has_avx512_vnni() {
  return arch::has_feature(arch::Feature::kAvx512Vnni);
}

bool cpu_has_avx512_bf16() {
  return arch::has_feature(arch::Feature::kAvx512Bf16);
}

std::vector<CpuExtension> cpu_extensions() {
  std::vector<CpuExtension> out;
  for (const arch::Extension& e : arch::extensions())
    out.push_back({e.name, arch::has_feature(e.feature)});
  return out;
}

void check_isa_environment() {
  for (const char* variable : {"KEV_ISA", "KEV_GEMM_ISA", "KEV_MERGE_ISA", "KEV_HEAD_ISA"})
    env_cap(variable);
}

}  // namespace kev
