#include "kev/core/isa.h"

#include <algorithm>
#include <array>
#include <cstdlib>
#include <string>

#include "kev/core/error.h"

#if defined(__aarch64__)
#include <asm/hwcap.h>
#include <sys/auxv.h>
#endif

namespace kev {

namespace {

#if defined(__x86_64__)
constexpr std::array kArchIsas = {Isa::kPortable, Isa::kAvx2, Isa::kAvx512};
constexpr const char* kArch = "x86-64";
#elif defined(__aarch64__)
constexpr std::array kArchIsas = {Isa::kPortable, Isa::kNeon};
constexpr const char* kArch = "aarch64";
#else
constexpr std::array kArchIsas = {Isa::kPortable};
constexpr const char* kArch = "other";
#endif

bool cpu_has_avx2() {
#if defined(__x86_64__)
  __builtin_cpu_init();
  return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
#else
  return false;
#endif
}

bool cpu_has_avx512() {
#if defined(__x86_64__)
  __builtin_cpu_init();
  return cpu_has_avx2() && __builtin_cpu_supports("avx512f") &&
         __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512vl");
#else
  return false;
#endif
}

#if defined(__aarch64__)
bool hwcap(unsigned long bit) {
  return (getauxval(AT_HWCAP) & bit) != 0;
}
#endif

bool cpu_has_neon() {
#if defined(__aarch64__)
  return hwcap(HWCAP_ASIMD);
#else
  return false;
#endif
}

// Position of `isa` in this architecture's order, or -1 if it is not one of its levels.
int rank(Isa isa) {
  auto it = std::find(kArchIsas.begin(), kArchIsas.end(), isa);
  return it == kArchIsas.end() ? -1 : static_cast<int>(it - kArchIsas.begin());
}

std::string level_list() {
  std::string out;
  for (Isa isa : kArchIsas) out += std::string(out.empty() ? "" : ", ") + isa_name(isa);
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
         value, kArch, level_list());
  return isa;
}

}  // namespace

const char* arch_name() {
  return kArch;
}

std::span<const Isa> arch_isas() {
  return kArchIsas;
}

bool isa_supported(Isa isa) {
  static const bool avx2 = cpu_has_avx2();
  static const bool avx512 = cpu_has_avx512();
  static const bool neon = cpu_has_neon();
  switch (isa) {
    case Isa::kAvx512:
      return avx512;
    case Isa::kAvx2:
      return avx2;
    case Isa::kNeon:
      return neon;
    default:
      return true;
  }
}

std::vector<Isa> supported_isas() {
  std::vector<Isa> out;
  for (Isa isa : kArchIsas)
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

Isa isa_at_most(Isa isa, std::span<const Isa> levels) {
  const int cap = rank(isa);
  Isa out = Isa::kPortable;
  for (Isa l : levels)
    if (rank(l) >= 0 && rank(l) <= cap && rank(l) > rank(out)) out = l;
  return out;
}

Isa dispatch_isa(const char* family_env) {
  std::optional<Isa> cap = env_cap(family_env);
  if (!cap) cap = env_cap("KEV_ISA");
  Isa best = best_supported_isa();
  if (!cap) return best;
  return rank(*cap) < rank(best) ? *cap : best;
}

bool cpu_has_avx512_vnni() {
#if defined(__x86_64__)
  static const bool has = isa_supported(Isa::kAvx512) && __builtin_cpu_supports("avx512vnni");
  return has;
#else
  return false;
#endif
}

bool cpu_has_avx512_bf16() {
#if defined(__x86_64__)
  static const bool has = isa_supported(Isa::kAvx512) && __builtin_cpu_supports("avx512bf16");
  return has;
#else
  return false;
#endif
}

bool cpu_has_arm_dotprod() {
#if defined(__aarch64__)
  return hwcap(HWCAP_ASIMDDP);
#else
  return false;
#endif
}

bool cpu_has_arm_sve() {
#if defined(__aarch64__)
  return hwcap(HWCAP_SVE);
#else
  return false;
#endif
}

void check_isa_environment() {
  for (const char* variable : {"KEV_ISA", "KEV_GEMM_ISA", "KEV_MERGE_ISA", "KEV_HEAD_ISA"})
    env_cap(variable);
}

}  // namespace kev
