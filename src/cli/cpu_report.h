// What this CPU supports and which kernel variant each family runs (after KEV_ISA and the
// per-family variables), as JSON: `kev cpu` prints it, `kev bench` records it in its results.
#pragma once
#include <nlohmann/json.hpp>
#include <string_view>

#include "kev/cpu/gemm.h"
#include "kev/cpu/gemm_avx512.h"
#include "kev/cpu/gemm_int8.h"
#include "kev/cpu/isa.h"
#include "kev/cpu/merge.h"
#include "kev/cpu/model_kernels.h"
#include "kev/head/pointer_head.h"

namespace kev::cli {

// "arch" is this build's architecture; "supported" its levels, then the extensions some kernels
// use (x86-64: avx512_vnni, avx512_bf16; aarch64: dotprod, sve; none on other targets).
inline nlohmann::json cpu_report() {
  nlohmann::json supported = nlohmann::json::object();
  for (Isa isa : arch_isas()) supported[isa_name(isa)] = isa_supported(isa);
  if (std::string_view(arch_name()) == "aarch64") {
    supported["dotprod"] = cpu_has_arm_dotprod();
    supported["sve"] = cpu_has_arm_sve();
  } else if (std::string_view(arch_name()) == "x86-64") {
    supported["avx512_vnni"] = cpu_has_avx512_vnni();
    supported["avx512_bf16"] = cpu_has_avx512_bf16();
  }
  return {{"arch", arch_name()},
          {"supported", supported},
          {"kernels",
           {{"gemm", isa_name(best_gemm_isa())},
            {"vec", isa_name(model_kernels().vec_isa())},
            {"gemm_int8", isa_name(best_int8_isa())},
            {"gemm_int8_kernel", int8_kernel_name(best_int8_kernel())},
            {"gemm_bf16_dot", bf16_kernel_name(best_bf16_kernel())},
            {"merge", isa_name(merge_isa())},
            {"head", isa_name(head_isa())}}}};
}

}  // namespace kev::cli
