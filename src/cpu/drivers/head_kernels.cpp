// The pointer head's dispatch (head_kernels.h): the family folder's variant of the level
// (arch::head) where it has one, else the portable one.
#include "kev/cpu/head_kernels.h"

#include "cpu/arch.h"
#include "cpu/portable/portable.h"
#include "kev/core/error.h"

namespace kev::head_kernels {

const KernelSet& kernels(Isa isa) {
  if (!isa_supported(isa))
    fail(ErrorKind::kUnsupported, "this CPU cannot run the {} pointer-head kernels", isa_name(isa));
  const KernelSet* set = arch::head(isa);
  return set != nullptr ? *set : portable::head();
}

}  // namespace kev::head_kernels
