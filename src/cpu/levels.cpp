#include "cpu/levels.h"

#include <cstdlib>
#include <cstring>

#include "kev/core/test_hooks.h"
#include "kev/cpu/head_kernels.h"
#include "kev/cpu/merge.h"

namespace kev {

Isa gemm_level() {
  static const Isa isa = dispatch_isa("KEV_GEMM_ISA");
  return isa;
}

Isa merge_isa() {
  static const Isa isa = dispatch_isa("KEV_MERGE_ISA");
  return isa;
}

Isa head_isa() {
  static const Isa isa = dispatch_isa("KEV_HEAD_ISA");
  return isa;
}

bool avx512_emulation_requested() {
  if (!test_hooks::avx512_emulation()) return false;
  for (const char* variable : {"KEV_GEMM_ISA", "KEV_ISA"}) {
    const char* cap = std::getenv(variable);
    if (cap != nullptr && *cap != '\0') return std::strcmp(cap, "avx512") == 0;
  }
  return true;
}

}  // namespace kev
