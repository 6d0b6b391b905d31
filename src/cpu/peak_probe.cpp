// The benchmarks' peak probes (kev/cpu/peak_probe.h), over the family's chains (arch.h).
#include "kev/cpu/peak_probe.h"

#include "cpu/arch.h"

namespace kev {

bool has_peak_probe(Isa level) {
  return arch::fma_chains(level) != nullptr;
}

double run_peak_probe(Isa level, long iters, bool fused) {
  const arch::FmaChains chains = arch::fma_chains(level);
  return chains == nullptr ? 0.0 : chains(iters, fused);
}

const char* dot_probe_name(DotProbe p) {
  switch (p) {
    case DotProbe::kBf16Pairs:
      return "vdpbf16ps";
    case DotProbe::kInt16Pairs:
      return "vpdpwssd";
    case DotProbe::kInt8Quads:
      return "vpdpbusd";
    case DotProbe::kInt8QuadsYmm:
      return "vpdpbusd-ymm";
    case DotProbe::kInt8Sdot:
      return "sdot";
    case DotProbe::kAmxBf16:
      return "tdpbf16ps";
    case DotProbe::kAmxInt8:
      return "tdpbusd";
  }
  return "?";
}

bool has_dot_peak_probe(DotProbe p) {
  return arch::dot_chains(p) != nullptr;
}

double run_dot_peak_probe(DotProbe p, long iters) {
  const arch::DotChains chains = arch::dot_chains(p);
  return chains == nullptr ? 0.0 : chains(iters);
}

}  // namespace kev
