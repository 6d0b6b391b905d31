// The recurrent gated delta rule alone (kev/cpu/vec.h: gdn_steps, the fp32 prefill's GDN work in
// every mode) at one value head's shape (key and value dims 128, the 0.8B and 4B members' own),
// on one thread, for every level this CPU runs, against the multiply-then-add ceiling of one core
// (bench/fma_peak.h). Per token and state element the step does 4 multiplies and 3 adds, each
// rounded (no FMA: vec.h's order), so where multiplies and adds issue to separate pipes (Zen) the
// multiplies bound it at 7/8 of that ceiling. The token inputs stride through a layer-sized row
// (--stride floats, 6,144 at 0.8B) as the forward lays them out. The portable level's loop is
// compiled once per x86-64 level and picked by the CPU (target clones), so its line is held
// against the widest level's ceiling.
//
// Usage: bench_gdn [--tokens N] [--heads N] [--stride N] [--reps N] [--isa NAME]
// Prints one JSON line per level this CPU runs (or the one --isa names).
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "bench_args.h"
#include "fma_peak.h"
#include "kev/cpu/isa.h"
#include "kev/cpu/vec.h"

namespace {

using namespace kev;

constexpr int64_t kDim = 128;  // key and value dims of one head

struct Options {
  int64_t tokens = 512, heads = 4, stride = 6144;
  int reps = 5;
  std::string isa;
};

[[noreturn]] void usage(const char* why) {
  std::fprintf(stderr,
               "bench_gdn: %s\nusage: bench_gdn [--tokens N (1..65536)] [--heads N (1..64)] "
               "[--stride N (3 x 128 x heads..65536)] [--reps N (1..100)] [--isa NAME]\n",
               why);
  std::exit(2);
}

Options parse(int argc, char** argv) {
  Options o;
  for (bench::ArgPairs a(argc, argv, usage); a.next();) {
    if (a.is("--tokens"))
      o.tokens = a.integer(1, 65536);
    else if (a.is("--heads"))
      o.heads = a.integer(1, 64);
    else if (a.is("--stride"))
      o.stride = a.integer(1, 65536);
    else if (a.is("--reps"))
      o.reps = static_cast<int>(a.integer(1, 100));
    else if (a.is("--isa"))
      o.isa = a.value();
    else
      a.unknown();
  }
  if (o.stride < 3 * kDim * o.heads) usage("--stride: smaller than q, k and v of every head");
  return o;
}

void run(Isa isa, const Options& o) {
  const int64_t n = o.tokens, h = o.heads;
  std::vector<float> qkv(static_cast<size_t>(n * o.stride)), out(static_cast<size_t>(n * h * kDim));
  std::vector<float> state(static_cast<size_t>(h * kDim * kDim)), eg(static_cast<size_t>(n));
  std::vector<float> beta(eg.size());
  for (size_t i = 0; i < qkv.size(); ++i) qkv[i] = static_cast<float>(i % 19) * 0.005f - 0.045f;
  for (size_t t = 0; t < eg.size(); ++t) {
    eg[t] = 0.95f + static_cast<float>(t % 5) * 0.01f;
    beta[t] = 0.3f + static_cast<float>(t % 7) * 0.05f;
  }
  double best = 1e300;
  for (int r = 0; r < o.reps; ++r) {
    std::fill(state.begin(), state.end(), 0.01f);
    const double c0 = bench::detail::thread_cpu_seconds();
    for (int64_t hh = 0; hh < h; ++hh) {  // q | k | v of every head in one row, as the forward
      const float* q = qkv.data() + hh * kDim;
      vec::gdn_steps_isa(isa, state.data() + hh * kDim * kDim, kDim, kDim, n,
                         {q, q + h * kDim, q + 2 * h * kDim, o.stride, eg.data(), beta.data(),
                          out.data() + hh * kDim, h * kDim});
    }
    best = std::min(best, bench::detail::thread_cpu_seconds() - c0);
  }
  const double elements = static_cast<double>(n * h) * kDim * kDim;  // per token and element
  const double gflops = 7.0 * elements / best / 1e9;
  // The portable loop is compiled per x86-64 level (target clones): held against the widest.
  const Isa peak_isa = isa == Isa::kPortable ? supported_isas().back() : isa;
  const bench::Peak mul_add = bench::fma_peak_gflops(peak_isa, 1, false);
  std::printf(
      "{\"isa\": \"%s\", \"threads\": 1, \"tokens\": %lld, \"heads\": %lld, \"dk\": %lld, "
      "\"dv\": %lld, \"ns_per_element\": %.4f, \"gflops\": %.2f, "
      "\"mul_add_peak_cpu_gflops\": %.2f, \"of_mul_add_peak\": %.3f, \"checksum\": %.6g}\n",
      isa_name(isa), static_cast<long long>(n), static_cast<long long>(h),
      static_cast<long long>(kDim), static_cast<long long>(kDim), best * 1e9 / elements, gflops,
      mul_add.cpu, mul_add.cpu > 0 ? gflops / mul_add.cpu : 0.0,
      static_cast<double>(out[7] + state[11]));
}

}  // namespace

int main(int argc, char** argv) {
  const Options o = parse(argc, argv);
  bench::for_levels(o.isa, usage, [&](Isa isa) { run(isa, o); });
}
