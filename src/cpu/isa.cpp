#include "kev/cpu/isa.h"

#include <algorithm>
#include <cstdlib>
#include <string>
#include <vector>

#include "cpu/arch.h"
#include "kev/core/error.h"

namespace kev {

namespace {

// This build's levels as the family registered them (rank = position).
std::span<const arch::Level> levels() {
  return arch::levels();
}

bool is_level(Isa isa) {
  return isa.rank() >= 0 && static_cast<size_t>(isa.rank()) < levels().size();
}

std::string level_list() {
  std::string out;
  for (const arch::Level& l : levels()) out += std::string(out.empty() ? "" : ", ") + l.name;
  return out;
}

// The cap an environment variable asks for, or nullopt when it is unset or empty.
std::optional<Isa> env_cap(const char* variable) {
  const char* value = std::getenv(variable);
  if (value == nullptr || *value == '\0') return std::nullopt;
  std::optional<Isa> isa = parse_isa(value);
  if (!isa)
    fail(ErrorKind::kBadInput,
         "{}={}: not a level of this {} build (its levels: {}; scalar = portable)", variable, value,
         arch::name(), level_list());
  return isa;
}

}  // namespace

const char* arch_name() {
  return arch::name();
}

std::span<const Isa> arch_isas() {
  static const std::vector<Isa> all = [] {
    std::vector<Isa> out;
    for (size_t r = 0; r < levels().size(); ++r) out.push_back(Isa::of_rank(static_cast<int>(r)));
    return out;
  }();
  return all;
}

bool isa_supported(Isa isa) {
  // The CPU check of each level runs once per process (arch.h's contract), in rank order.
  static const std::vector<bool> by_rank = [] {
    std::vector<bool> out;
    for (const arch::Level& l : levels()) out.push_back(l.cpu_runs == nullptr || l.cpu_runs());
    return out;
  }();
  return isa == Isa::kPortable || (is_level(isa) && by_rank[static_cast<size_t>(isa.rank())]);
}

std::vector<Isa> supported_isas() {
  std::vector<Isa> out;
  for (Isa isa : arch_isas())
    if (isa_supported(isa)) out.push_back(isa);
  return out;
}

const char* isa_name(Isa isa) {
  return is_level(isa) ? levels()[static_cast<size_t>(isa.rank())].name : "?";
}

std::optional<Isa> parse_isa(std::string_view name) {
  if (name == "scalar") return Isa::kPortable;
  for (Isa isa : arch_isas())
    if (name == isa_name(isa)) return isa;
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
  return std::min(*cap, best);
}

std::vector<CpuExtension> cpu_extensions() {
  std::vector<CpuExtension> out;
  for (const arch::Extension& e : arch::extensions()) out.push_back({e.name, e.present()});
  return out;
}

void check_isa_environment() {
  for (const char* variable : {"KEV_ISA", "KEV_GEMM_ISA", "KEV_MERGE_ISA", "KEV_HEAD_ISA"})
    env_cap(variable);
}

}  // namespace kev
