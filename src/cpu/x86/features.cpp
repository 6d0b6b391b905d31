// The x86-64 family: its levels and CPUID feature detection.
#include <array>

#include "cpu/arch.h"
#include "cpu/x86/levels.h"

namespace kev::arch {
namespace {

bool cpu_has_avx2() {
  __builtin_cpu_init();
  return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
}

bool cpu_has_avx512() {
  __builtin_cpu_init();
  return cpu_has_avx2() && __builtin_cpu_supports("avx512f") &&
         __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512vl");
}

// Placed by the ranks of levels.h, so the two cannot disagree.
constexpr auto kLevels = [] {
  std::array<Level, 3> t{};
  t[Isa::kPortable.rank()] = {"portable", nullptr};
  t[kAvx2.rank()] = {"avx2", &cpu_has_avx2};
  t[kAvx512.rank()] = {"avx512", &cpu_has_avx512};
  return t;
}();

}  // namespace

const char* name() {
  return "x86-64";
}

std::span<const Level> levels() {
  return kLevels;
}

// The precision-mode extensions count only on top of the AVX-512 level.
bool cpu_has_avx512_vnni() {
  static const bool vnni = isa_supported(kAvx512) && __builtin_cpu_supports("avx512vnni");
  return vnni;
}

bool cpu_has_avx512_bf16() {
  static const bool bf16 = isa_supported(kAvx512) && __builtin_cpu_supports("avx512bf16");
  return bf16;
}

std::span<const Extension> extensions() {
  static constexpr Extension kExtensions[] = {{"avx512_vnni", &cpu_has_avx512_vnni},
                                              {"avx512_bf16", &cpu_has_avx512_bf16}};
  return kExtensions;
}

}  // namespace kev::arch
