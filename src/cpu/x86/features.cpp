// The x86-64 family: its levels and CPUID feature detection.
#include <array>

#include "cpu/arch.h"

namespace kev::arch {
namespace {

constexpr std::array kLevels = {Isa::kPortable, Isa::kAvx2, Isa::kAvx512};

bool cpu_has_avx2() {
  __builtin_cpu_init();
  return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
}

bool cpu_has_avx512() {
  __builtin_cpu_init();
  return cpu_has_avx2() && __builtin_cpu_supports("avx512f") &&
         __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512vl");
}

}  // namespace

const char* name() {
  return "x86-64";
}

std::span<const Isa> levels() {
  return kLevels;
}

bool supports(Isa level) {
  static const bool avx2 = cpu_has_avx2();
  static const bool avx512 = cpu_has_avx512();
  switch (level) {
    case Isa::kPortable:
      return true;
    case Isa::kAvx2:
      return avx2;
    case Isa::kAvx512:
      return avx512;
    default:
      return false;
  }
}

std::span<const Extension> extensions() {
  static constexpr Extension kExtensions[] = {{"avx512_vnni", Feature::kAvx512Vnni},
                                              {"avx512_bf16", Feature::kAvx512Bf16}};
  return kExtensions;
}

// The precision-mode extensions count only on top of the AVX-512 level.
bool has_feature(Feature f) {
  static const bool vnni = supports(Isa::kAvx512) && __builtin_cpu_supports("avx512vnni");
  static const bool bf16 = supports(Isa::kAvx512) && __builtin_cpu_supports("avx512bf16");
  switch (f) {
    case Feature::kAvx512Vnni:
      return vnni;
    case Feature::kAvx512Bf16:
      return bf16;
    default:
      return false;
  }
}

}  // namespace kev::arch
