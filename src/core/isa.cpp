#include "kev/core/isa.h"

#include <algorithm>
#include <cstdlib>

#include "kev/core/error.h"

namespace kev {

namespace {

bool cpu_has_avx2() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_cpu_init();
  return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
#else
  return false;
#endif
}

bool cpu_has_avx512() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_cpu_init();
  return cpu_has_avx2() && __builtin_cpu_supports("avx512f") &&
         __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512vl");
#else
  return false;
#endif
}

// The cap an environment variable asks for, or nullopt when it is unset or empty.
std::optional<Isa> env_cap(const char* variable) {
  const char* value = std::getenv(variable);
  if (value == nullptr || *value == '\0') return std::nullopt;
  std::optional<Isa> isa = parse_isa(value);
  if (!isa)
    fail(ErrorKind::kBadInput, "{}={}: expected portable (or scalar), avx2 or avx512", variable,
         value);
  return isa;
}

}  // namespace

bool isa_supported(Isa isa) {
  static const bool avx2 = cpu_has_avx2();
  static const bool avx512 = cpu_has_avx512();
  switch (isa) {
    case Isa::kAvx512:
      return avx512;
    case Isa::kAvx2:
      return avx2;
    default:
      return true;
  }
}

std::vector<Isa> supported_isas() {
  std::vector<Isa> out;
  for (Isa isa : {Isa::kPortable, Isa::kAvx2, Isa::kAvx512})
    if (isa_supported(isa)) out.push_back(isa);
  return out;
}

const char* isa_name(Isa isa) {
  switch (isa) {
    case Isa::kAvx512:
      return "avx512";
    case Isa::kAvx2:
      return "avx2";
    default:
      return "portable";
  }
}

std::optional<Isa> parse_isa(std::string_view name) {
  if (name == "portable" || name == "scalar") return Isa::kPortable;
  if (name == "avx2") return Isa::kAvx2;
  if (name == "avx512") return Isa::kAvx512;
  return std::nullopt;
}

Isa best_supported_isa() {
  if (isa_supported(Isa::kAvx512)) return Isa::kAvx512;
  if (isa_supported(Isa::kAvx2)) return Isa::kAvx2;
  return Isa::kPortable;
}

Isa dispatch_isa(const char* family_env) {
  std::optional<Isa> cap = env_cap(family_env);
  if (!cap) cap = env_cap("KEV_ISA");
  Isa best = best_supported_isa();
  if (!cap) return best;
  return static_cast<Isa>(std::min(static_cast<int>(*cap), static_cast<int>(best)));
}

bool cpu_has_avx512_vnni() {
#if defined(__x86_64__) || defined(__i386__)
  static const bool has = isa_supported(Isa::kAvx512) && __builtin_cpu_supports("avx512vnni");
  return has;
#else
  return false;
#endif
}

bool cpu_has_avx512_bf16() {
#if defined(__x86_64__) || defined(__i386__)
  static const bool has = isa_supported(Isa::kAvx512) && __builtin_cpu_supports("avx512bf16");
  return has;
#else
  return false;
#endif
}

void check_isa_environment() {
  for (const char* variable : {"KEV_ISA", "KEV_GEMM_ISA", "KEV_MERGE_ISA", "KEV_HEAD_ISA"})
    env_cap(variable);
}

}  // namespace kev
