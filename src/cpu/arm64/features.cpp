// The aarch64 family: its levels and HWCAP feature detection.
#include <asm/hwcap.h>
#include <sys/auxv.h>

#include <array>

#include "cpu/arch.h"

namespace kev::arch {
namespace {

constexpr std::array kLevels = {Isa::kPortable, Isa::kNeon};

bool hwcap(unsigned long bit) {
  return (getauxval(AT_HWCAP) & bit) != 0;
}

}  // namespace

const char* name() {
  return "aarch64";
}

std::span<const Isa> levels() {
  return kLevels;
}

bool supports(Isa level) {
  static const bool neon = hwcap(HWCAP_ASIMD);
  switch (level) {
    case Isa::kPortable:
      return true;
    case Isa::kNeon:
      return neon;
    default:
      return false;
  }
}

std::span<const Extension> extensions() {
  static constexpr Extension kExtensions[] = {{"dotprod", Feature::kArmDotprod},
                                              {"sve", Feature::kArmSve}};
  return kExtensions;
}

bool has_feature(Feature f) {
  switch (f) {
    case Feature::kArmDotprod:
      return hwcap(HWCAP_ASIMDDP);
    case Feature::kArmSve:
      return hwcap(HWCAP_SVE);
    default:
      return false;
  }
}

}  // namespace kev::arch
