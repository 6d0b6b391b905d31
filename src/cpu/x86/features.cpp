// The x86-64 family: its levels and CPUID feature detection.
#include <cpuid.h>

#include <array>
#if defined(__linux__)
#include <sys/syscall.h>
#include <unistd.h>
#endif

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

// CPUID.(7, 1):EAX bit 4. (Not __builtin_cpu_supports: clang 14 does not know "avxvnni".)
bool cpu_has_avx_vnni() {
  static const bool vnni = [] {
    unsigned a = 0, b = 0, c = 0, d = 0;
    return isa_supported(kAvx2) && __get_cpuid_count(7, 1, &a, &b, &c, &d) != 0 &&
           (a >> 4 & 1u) != 0;
  }();
  return vnni;
}

// The other precision-mode extensions count only on top of the AVX-512 level.
bool cpu_has_avx512_vnni() {
  static const bool vnni = isa_supported(kAvx512) && __builtin_cpu_supports("avx512vnni");
  return vnni;
}

bool cpu_has_avx512_bf16() {
  static const bool bf16 = isa_supported(kAvx512) && __builtin_cpu_supports("avx512bf16");
  return bf16;
}

namespace {

// CPUID.(7, 0):EDX bit 24 (AMX-TILE) and the given bit (25 AMX-INT8, 22 AMX-BF16).
bool cpuid_amx(unsigned bit) {
  unsigned a = 0, b = 0, c = 0, d = 0;
  if (__get_cpuid_count(7, 0, &a, &b, &c, &d) == 0) return false;
  return (d >> 24 & 1u) != 0 && (d >> bit & 1u) != 0;
}

// Linux (5.16 and later) hands out the tile data state only to a process that asks for it;
// without it the first tile instruction faults.
bool os_grants_tiles() {
#if defined(__linux__) && defined(SYS_arch_prctl)
  static const bool granted = [] {
    constexpr long kReqXcompPerm = 0x1023;  // ARCH_REQ_XCOMP_PERM
    constexpr long kXtiledata = 18;         // XFEATURE_XTILEDATA
    return syscall(SYS_arch_prctl, kReqXcompPerm, kXtiledata) == 0;
  }();
  return granted;
#else
  return false;
#endif
}

}  // namespace

bool cpu_has_amx_int8() {
  static const bool amx = isa_supported(kAvx512) && cpuid_amx(25) && os_grants_tiles();
  return amx;
}

bool cpu_has_amx_bf16() {
  static const bool amx = isa_supported(kAvx512) && cpuid_amx(22) && os_grants_tiles();
  return amx;
}

std::span<const Extension> extensions() {
  static constexpr Extension kExtensions[] = {{"avx_vnni", &cpu_has_avx_vnni},
                                              {"avx512_vnni", &cpu_has_avx512_vnni},
                                              {"avx512_bf16", &cpu_has_avx512_bf16},
                                              {"amx_int8", &cpu_has_amx_int8},
                                              {"amx_bf16", &cpu_has_amx_bf16}};
  return kExtensions;
}

}  // namespace kev::arch
