// The FP32 peak probe the benchmarks measure a machine with (bench/fma_peak.h): independent
// FP32 chains of a level's widest vector, enough of them to cover the latency, on the calling
// thread. fused: one FMA a step; else a multiply, then an add of the rounded product (the order
// of the vector kernels, vec.h). Each CPU family supplies its own chains for its vector levels;
// a level without them has no probe (the benchmarks then report the peak as unknown).
// The fast modes' product instructions have probes of their own (DotProbe): the same
// independent chains of one instruction, so each mode's speed can be read as a fraction of the
// peak of the instruction its kernel runs on.
// Thread safety: any thread; each call runs on its caller alone.
#pragma once
#include "kev/cpu/isa.h"

namespace kev {

// Whether this build has a probe for `level` (a level of this CPU family with vector chains).
bool has_peak_probe(Isa level);
// Runs the probe for `iters` iterations and returns the FLOPs it did (2 a lane a step); the
// caller times it. 0 without a probe. Call it only for a level the CPU supports.
double run_peak_probe(Isa level, long iters, bool fused);

// The product instructions of the precision modes' kernels (precision_kernels.h).
enum class DotProbe {
  kBf16Pairs,     // vdpbf16ps (avx512bf16): BF16 pairs into FP32, 2 products a lane
  kInt16Pairs,    // vpdpwssd (avx512vnni, the int8 mode's int16 activations): 2 products a lane
  kInt8Quads,     // vpdpbusd (AVX-512 VNNI): u8 x s8 quadruples into int32, 4 products a lane
  kInt8QuadsYmm,  // vpdpbusd on ymm (AVX-VNNI, VEX): the same, 8 lanes
  kInt8Sdot,      // sdot (aarch64 dotprod): s8 x s8 quadruples into int32, 4 products a lane
  kAmxBf16,       // tdpbf16ps: a 16 x 16 FP32 tile += 16 x 32 BF16 times 32 x 16 BF16
  kAmxInt8,       // tdpbusd: a 16 x 16 int32 tile += 16 x 64 u8 times 64 x 16 s8
};
const char* dot_probe_name(DotProbe p);  // the instruction: "vdpbf16ps", ..., "tdpbusd"
// Whether this build has a probe for `p` and this CPU (and, for AMX, the OS) runs it.
bool has_dot_peak_probe(DotProbe p);
// Runs it for `iters` iterations on the calling thread and returns the operations done (2 a
// product, as FLOPs count a multiply-add); 0 where has_dot_peak_probe(p) is false.
double run_dot_peak_probe(DotProbe p, long iters);

}  // namespace kev
