// The aarch64 family: its levels and HWCAP feature detection.
#include <asm/hwcap.h>
#include <sys/auxv.h>

#include <array>

#include "cpu/arch.h"
#include "cpu/arm64/levels.h"

namespace kev::arch {
namespace {

bool hwcap(unsigned long bit) {
  return (getauxval(AT_HWCAP) & bit) != 0;
}

bool cpu_has_neon() {
  return hwcap(HWCAP_ASIMD);
}

// Placed by the ranks of levels.h, so the two cannot disagree.
constexpr auto kLevels = [] {
  std::array<Level, 2> t{};
  t[Isa::kPortable.rank()] = {"portable", nullptr};
  t[kNeon.rank()] = {"neon", &cpu_has_neon};
  return t;
}();

}  // namespace

bool cpu_has_dotprod() {
  return hwcap(HWCAP_ASIMDDP);
}

const char* name() {
  return "aarch64";
}

std::span<const Level> levels() {
  return kLevels;
}

std::span<const Extension> extensions() {
  static constexpr Extension kExtensions[] = {{"dotprod", &cpu_has_dotprod},
                                              {"sve", [] { return hwcap(HWCAP_SVE); }}};
  return kExtensions;
}

}  // namespace kev::arch
