// kev cpu: what this CPU supports and which kernel variant each family runs (after KEV_ISA and the
// per-family variables), as JSON. For bug reports, benchmarks and tests that force a path.
// "vec" is the forward's vector kernels (dot rows, GDN steps: kev/cpu/model_kernels.h).
// gemm_int8_kernel / gemm_bf16_dot name the precision-mode kernels (precision_kernels.h); asking
// for them runs the AVX-512 start-up probes on a CPU that has those kernels.
#include <cstdio>

#include "cli/command.h"
#include "cli/cpu_report.h"

namespace {

const bool cpu_registered = kev::cli::register_command(
    "cpu", "the instruction sets this CPU supports and the kernel variants in use (JSON)",
    [](CLI::App&) {
      return [] {
        std::printf("%s\n", kev::cli::cpu_report().dump().c_str());
        return 0;
      };
    });

}  // namespace
