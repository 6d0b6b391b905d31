// kev cpu: what this CPU supports and which kernel variant each family runs (after KEV_ISA and the
// per-family variables), as JSON. For bug reports, benchmarks and tests that force a path.
// "vec" is the forward's vector kernels (dot rows, GDN steps: model/kernels.h).
// gemm_int8_kernel / gemm_bf16_dot name the precision-mode kernels (gemm_avx512.h); asking for
// them runs the AVX-512 start-up probes on a CPU that has those kernels.
#include <cstdio>
#include <string_view>

#include <nlohmann/json.hpp>

#include "cli/command.h"
#include "kev/core/isa.h"
#include "kev/export/merge.h"
#include "kev/head/pointer_head.h"
#include "kev/model/gemm.h"
#include "kev/model/gemm_avx512.h"
#include "kev/model/gemm_int8.h"
#include "model/kernels.h"

namespace {

const bool registered = kev::cli::register_command(
    "cpu", "the instruction sets this CPU supports and the kernel variants in use (JSON)",
    [](CLI::App&) {
      return [] {
        using kev::Isa;
        // "supported": this architecture's levels, then the extensions some kernels use.
        nlohmann::json supported = nlohmann::json::object();
        for (Isa isa : kev::arch_isas()) supported[kev::isa_name(isa)] = kev::isa_supported(isa);
        if (std::string_view(kev::arch_name()) == "aarch64") {
          supported["dotprod"] = kev::cpu_has_arm_dotprod();
          supported["sve"] = kev::cpu_has_arm_sve();
        } else {
          supported["avx512_vnni"] = kev::cpu_has_avx512_vnni();
          supported["avx512_bf16"] = kev::cpu_has_avx512_bf16();
        }
        nlohmann::json j = {{"arch", kev::arch_name()},
                            {"supported", supported},
                            {"kernels",
                             {{"gemm", kev::isa_name(kev::best_gemm_isa())},
                              {"vec", kev::isa_name(kev::model_kernels().vec_isa())},
                              {"gemm_int8", kev::isa_name(kev::best_int8_isa())},
                              {"gemm_int8_kernel", kev::int8_kernel_name(kev::best_int8_kernel())},
                              {"gemm_bf16_dot", kev::bf16_kernel_name(kev::best_bf16_kernel())},
                              {"merge", kev::isa_name(kev::merge_isa())},
                              {"head", kev::isa_name(kev::head_isa())}}}};
        std::printf("%s\n", j.dump().c_str());
        return 0;
      };
    });

}  // namespace
