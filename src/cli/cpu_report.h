// What this CPU supports and which kernel variant each family runs (after KEV_ISA and the
// per-family variables), as JSON: `kev cpu` prints it, `kev bench` records it in its results.
#pragma once
#include <nlohmann/json.hpp>

#include "kev/core/isa.h"
#include "kev/export/merge.h"
#include "kev/head/pointer_head.h"
#include "kev/model/gemm.h"
#include "kev/model/gemm_avx512.h"
#include "kev/model/gemm_int8.h"

namespace kev::cli {

inline nlohmann::json cpu_report() {
  return {{"supported",
           {{"portable", true},
            {"avx2", isa_supported(Isa::kAvx2)},
            {"avx512", isa_supported(Isa::kAvx512)},
            {"avx512_vnni", cpu_has_avx512_vnni()},
            {"avx512_bf16", cpu_has_avx512_bf16()}}},
          {"kernels",
           {{"gemm", isa_name(best_gemm_isa())},
            {"gemm_int8", isa_name(best_int8_isa())},
            {"gemm_int8_kernel", int8_kernel_name(best_int8_kernel())},
            {"gemm_bf16_dot", bf16_kernel_name(best_bf16_kernel())},
            {"merge", isa_name(merge_isa())},
            {"head", isa_name(head_isa())}}}};
}

}  // namespace kev::cli
