// The achievable FP32 FMA peak of this machine for one GEMM instruction set: every core runs
// independent FMA chains (enough of them to cover the FMA latency on two FMA pipes) of the
// widest vector that ISA has, and the best of a few tries is kept. The same probe with a
// multiply then an add per step gives the ceiling of the vector kernels' order of operations
// (vec.h: each product rounded before its add), which on CPUs with two FMA pipes is half the FMA
// peak. The probe for an ISA is
// only called when the CPU has it (the caller picks it from isa_supported / the running
// ISA). The vector chains are the CPU family's (kev/cpu/peak_probe.h); a level without one
// reports 0 (unknown), so the benchmarks build and run on any architecture. dot_peak_gops is
// the same for the precision modes' product instructions (vdpbf16ps, vpdpwssd, tdpbf16ps, ...).
#pragma once
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstddef>
#include <ctime>
#include <thread>
#include <vector>

#include "kev/cpu/gemm.h"
#include "kev/cpu/peak_probe.h"

namespace kev::bench {

// wall: FLOP per wall second; cpu: FLOP per CPU second of the threads that ran (what the
// cores did when they were ours; the figure to hold a kernel against on a shared machine).
struct Peak {
  double wall = 0, cpu = 0;
};

namespace detail {

inline double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

// CPU seconds of the calling thread / of the process: on a shared machine a run that was
// descheduled part of the time still reports the speed of the cycles it actually got.
inline double thread_cpu_seconds() {
  timespec ts;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + 1e-9 * static_cast<double>(ts.tv_nsec);
}
inline double process_cpu_seconds() {
  timespec ts;
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + 1e-9 * static_cast<double>(ts.tv_nsec);
}

// Times one probe run of `iters` iterations on the calling thread.
template <typename Probe>
Peak timed(Probe probe, long iters) {
  auto t0 = std::chrono::steady_clock::now();
  double c0 = thread_cpu_seconds();
  const double gflop = probe(iters) / 1e9;
  double s = seconds_since(t0), c = thread_cpu_seconds() - c0;
  return {gflop / s, gflop / c};
}

// Scalar: the scalar GEMM path's own arithmetic (one std::fma per step) on 12 chains, or a
// multiply then an add (the scalar vector kernels').
inline double scalar_chains(long iters, bool fused) {
  volatile float seed = 0.999f;
  float acc[12];
  for (int i = 0; i < 12; ++i) acc[i] = 0.5f + static_cast<float>(i);
  const float a = seed, b = 0.0001f;
  if (fused) {
    for (long n = 0; n < iters; ++n)
      for (int i = 0; i < 12; ++i) acc[i] = std::fma(acc[i], a, b);
  } else {
    for (long n = 0; n < iters; ++n)
      for (int i = 0; i < 12; ++i) acc[i] = acc[i] * a + b;  // -ffp-contract=off: two roundings
  }
  float sink = 0;
  for (float v : acc) sink += v;
  volatile float keep = sink;
  (void)keep;
  return static_cast<double>(iters) * 12 * 2;
}

// kPortable runs the scalar chains; a vector level runs its family's probe (peak_probe.h).
inline Peak peak_one_core(Isa isa, bool fused) {
  Peak best;
  for (int t = 0; t < 3; ++t) {
    const auto run = [&](long iters) {
      return isa == Isa::kPortable ? scalar_chains(iters, fused)
                                   : run_peak_probe(isa, iters, fused);
    };
    Peak p = timed(run, 20'000'000);
    best.wall = std::max(best.wall, p.wall);
    best.cpu = std::max(best.cpu, p.cpu);
  }
  return best;
}

// The best of three runs of a product instruction's probe on the calling thread (AMX steps
// are 64 times the work of a vector step: fewer of them).
inline Peak dot_peak_one_core(DotProbe p) {
  const bool tiles = p == DotProbe::kAmxBf16 || p == DotProbe::kAmxInt8;
  Peak best;
  for (int t = 0; t < 3; ++t) {
    Peak r = timed([&](long iters) { return run_dot_peak_probe(p, iters); },
                   tiles ? 1'000'000 : 20'000'000);
    best.wall = std::max(best.wall, r.wall);
    best.cpu = std::max(best.cpu, r.cpu);
  }
  return best;
}

template <typename OneCore>
Peak on_cores(size_t threads, OneCore one_core) {
  std::vector<Peak> r(threads);
  std::vector<std::thread> ts;
  for (size_t t = 0; t < threads; ++t) ts.emplace_back([&, t] { r[t] = one_core(); });
  for (auto& t : ts) t.join();
  Peak sum;
  for (const Peak& p : r) sum.wall += p.wall, sum.cpu += p.cpu;
  return sum;
}

}  // namespace detail

// GFLOP/s of FP32 FMAs with `isa`'s widest vector on `threads` cores at once (sum over cores);
// fused = false: of a multiply then an add instead (the ceiling of the vector kernels' order of
// operations, 2 FLOPs a step either way). Zero where the CPU lacks the ISA or its family has no
// probe for it (unknown).
inline Peak fma_peak_gflops(Isa isa, size_t threads, bool fused = true) {
  if (!isa_supported(isa)) return {};
  if (isa != Isa::kPortable && !has_peak_probe(isa)) return {};
  return detail::on_cores(threads, [&] { return detail::peak_one_core(isa, fused); });
}

// Giga-operations per second (2 a product) of one precision-mode product instruction
// (peak_probe.h's DotProbe) on `threads` cores at once; zero where the CPU lacks it or this
// build has no probe for it (unknown).
inline Peak dot_peak_gops(DotProbe p, size_t threads) {
  if (!has_dot_peak_probe(p)) return {};
  return detail::on_cores(threads, [&] { return detail::dot_peak_one_core(p); });
}

}  // namespace kev::bench
