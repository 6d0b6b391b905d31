// The attention kernels alone (kev/cpu/vec.h: dot_block for the scores, axpy_block for the
// outputs) at the shape one task of the blocked attention runs (src/model/layers.cpp: 16 query
// rows x the query heads of one key/value head = 64 pairs, blocks of 128 keys, head_dim 256,
// key/value rows of kv_heads x head_dim floats), on one thread, against the two ceilings of one
// core (bench/fma_peak.h): the FMA peak, and the multiply-then-add ceiling that these kernels'
// order of operations (every product rounded before its add) allows. Keys and values stream
// block after block from a state of --keys positions (default 32,768: 64 MiB each at 0.8B
// dimensions, past every cache), as a long state's do.
//
// Usage: bench_attention [--keys N] [--kv-heads N] [--reps N] [--isa NAME]
// Prints one JSON line per level this CPU runs (or the one --isa names).
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "bench_args.h"
#include "fma_peak.h"
#include "kev/core/aligned.h"
#include "kev/cpu/isa.h"
#include "kev/cpu/vec.h"

namespace {

using namespace kev;

constexpr int64_t kPairs = 64, kBlockKeys = 128, kHeadDim = 256;

struct Options {
  int64_t keys = 32768, kv_heads = 2;
  int reps = 3;
  std::string isa;
};

[[noreturn]] void usage(const char* why) {
  std::fprintf(stderr,
               "bench_attention: %s\nusage: bench_attention [--keys N (128..1048576, a multiple "
               "of 128)] [--kv-heads N (1..16)] [--reps N (1..100)] [--isa NAME]\n",
               why);
  std::exit(2);
}

Options parse(int argc, char** argv) {
  Options o;
  for (bench::ArgPairs a(argc, argv, usage); a.next();) {
    if (a.is("--keys"))
      o.keys = a.integer(kBlockKeys, 1 << 20);
    else if (a.is("--kv-heads"))
      o.kv_heads = a.integer(1, 16);
    else if (a.is("--reps"))
      o.reps = static_cast<int>(a.integer(1, 100));
    else if (a.is("--isa"))
      o.isa = a.value();
    else
      a.unknown();
  }
  if (o.keys % kBlockKeys != 0) usage("--keys: not a multiple of 128");
  return o;
}

// GFLOP per CPU-second of the best of `reps` passes of `pass` (which does `flop` FLOPs).
template <class Pass>
double best_gflops(int reps, double flop, Pass pass) {
  double best = 0;
  for (int r = 0; r < reps; ++r) {
    const double c0 = bench::detail::thread_cpu_seconds();
    pass();
    best = std::max(best, flop / (bench::detail::thread_cpu_seconds() - c0) / 1e9);
  }
  return best;
}

void run(Isa isa, const Options& o) {
  const int64_t ld = o.kv_heads * kHeadDim, blocks = o.keys / kBlockKeys;
  AlignedVector<float> q(kPairs * kHeadDim), kv(static_cast<size_t>(o.keys * ld)),
      scores(kPairs * kBlockKeys), p(kPairs * kBlockKeys), out(kPairs * kHeadDim, 0.0f);
  for (size_t i = 0; i < q.size(); ++i) q[i] = static_cast<float>(i % 13) * 0.01f - 0.06f;
  for (size_t i = 0; i < kv.size(); ++i) kv[i] = static_cast<float>(i % 17) * 0.01f - 0.08f;
  for (size_t i = 0; i < p.size(); ++i) p[i] = static_cast<float>(i % 7) * 0.001f;
  const double flop = 2.0 * kPairs * kHeadDim * static_cast<double>(o.keys);
  const double dot = best_gflops(o.reps, flop, [&] {
    for (int64_t b = 0; b < blocks; ++b)
      vec::dot_block_isa(isa, q.data(), kHeadDim, kPairs, kv.data() + b * kBlockKeys * ld, ld,
                         kBlockKeys, kHeadDim, scores.data(), kBlockKeys);
  });
  const double axpy = best_gflops(o.reps, flop, [&] {
    for (int64_t b = 0; b < blocks; ++b)
      vec::axpy_block_isa(isa, out.data(), kHeadDim, kPairs, p.data(), kBlockKeys,
                          kv.data() + b * kBlockKeys * ld, ld, kBlockKeys, kHeadDim);
  });
  const bench::Peak fma = bench::fma_peak_gflops(isa, 1, true);
  const bench::Peak mul_add = bench::fma_peak_gflops(isa, 1, false);
  const auto of = [](double x, double peak) { return peak > 0 ? x / peak : 0.0; };
  std::printf(
      "{\"isa\": \"%s\", \"threads\": 1, \"keys\": %lld, \"kv_heads\": %lld, \"pairs\": %lld, "
      "\"head_dim\": %lld, \"fma_peak_cpu_gflops\": %.2f, \"mul_add_peak_cpu_gflops\": %.2f, "
      "\"dot_block_cpu_gflops\": %.2f, \"axpy_block_cpu_gflops\": %.2f, "
      "\"dot_block_of_fma_peak\": %.3f, \"axpy_block_of_fma_peak\": %.3f, "
      "\"dot_block_of_mul_add_peak\": %.3f, \"axpy_block_of_mul_add_peak\": %.3f, "
      "\"checksum\": %.6g}\n",
      isa_name(isa), static_cast<long long>(o.keys), static_cast<long long>(o.kv_heads),
      static_cast<long long>(kPairs), static_cast<long long>(kHeadDim), fma.cpu, mul_add.cpu, dot,
      axpy, of(dot, fma.cpu), of(axpy, fma.cpu), of(dot, mul_add.cpu), of(axpy, mul_add.cpu),
      static_cast<double>(scores[5] + out[7]));
}

}  // namespace

int main(int argc, char** argv) {
  const Options o = parse(argc, argv);
  bench::for_levels(o.isa, usage, [&](Isa isa) { run(isa, o); });
}
