// The FP32 peak probe the benchmarks measure a machine with (bench/fma_peak.h): independent
// FP32 chains of a level's widest vector, enough of them to cover the latency, on the calling
// thread. fused: one FMA a step; else a multiply, then an add of the rounded product (the order
// of the vector kernels, vec.h). Each CPU family supplies its own chains for its vector levels;
// a level without them has no probe (the benchmarks then report the peak as unknown).
// Thread safety: any thread; each call runs on its caller alone.
#pragma once
#include "kev/cpu/isa.h"

namespace kev {

// Whether this build has a probe for `level` (a level of this CPU family with vector chains).
bool has_peak_probe(Isa level);
// Runs the probe for `iters` iterations and returns the FLOPs it did (2 a lane a step); the
// caller times it. 0 without a probe. Call it only for a level the CPU supports.
double run_peak_probe(Isa level, long iters, bool fused);

}  // namespace kev
