// The benchmarks' peak probe (kev/cpu/peak_probe.h), over the family's chains (arch.h).
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

}  // namespace kev
