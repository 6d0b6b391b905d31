// What this CPU supports and which kernel variant each family runs (after KEV_ISA and the
// per-family variables), as JSON: `kev cpu` prints it, `kev bench` records it in its results.
#pragma once
#include <nlohmann/json.hpp>

#include "kev/cpu/gemm.h"
#include "kev/cpu/gemm_int8.h"
#include "kev/cpu/isa.h"
#include "kev/cpu/merge.h"
#include "kev/cpu/model_kernels.h"
#include "kev/cpu/precision_kernels.h"
#include "kev/head/pointer_head.h"

namespace kev::cli {

// "arch" is this build's architecture; "supported" its levels, then the extensions its CPU
// family folder reports (cpu/isa.h cpu_extensions()).
inline nlohmann::json cpu_report() {
  nlohmann::json supported = nlohmann::json::object();
  for (Isa isa : arch_isas()) supported[isa_name(isa)] = isa_supported(isa);
  for (const CpuExtension& e : cpu_extensions()) supported[e.name] = e.present;
  return {{"arch", arch_name()},
          {"supported", supported},
          {"kernels",
           {{"gemm", isa_name(best_gemm_isa())},
            {"vec", isa_name(model_kernels().vec_isa())},
            {"gemm_int8", isa_name(best_int8_isa())},
            {"gemm_int8_kernel", int8_kernel_name(best_int8_kernel())},
            {"gemm_int8_a8_kernel", int8_kernel_name(best_int8_kernel(ActivationWidth::k8Bit))},
            {"gemm_bf16_dot", bf16_kernel_name(best_bf16_kernel())},
            {"merge", isa_name(merge_isa())},
            {"head", isa_name(head_isa())}}}};
}

}  // namespace kev::cli
