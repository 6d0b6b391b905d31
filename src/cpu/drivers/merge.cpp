// The LoRA merge's dispatch (merge.h): the family folder's variant of the level (arch::merge)
// where it has one, else the portable one.
#include "kev/cpu/merge.h"

#include "cpu/arch.h"
#include "cpu/portable/portable.h"
#include "kev/core/error.h"

namespace kev {

void merge_lora_rows(const void* w, const float* b, const float* a, int64_t rank, int64_t cols,
                     float scale, int64_t rows, void* out, Isa isa) {
  if (!isa_supported(isa))
    fail(ErrorKind::kUnsupported, "this CPU cannot run the {} merge kernels", isa_name(isa));
  arch::MergeRows variant = arch::merge(isa);
  if (variant == nullptr) variant = &portable::merge_rows;
  variant(static_cast<const uint8_t*>(w), b, a, rank, cols, scale, rows,
          static_cast<uint8_t*>(out));
}

}  // namespace kev
