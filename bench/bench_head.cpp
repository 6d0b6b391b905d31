// Pointer head at Kev-4B size (d = 2560, p = 256): one 255-option question, and a batch of 64
// questions x 8 options; projection + calibration, workspace reused across iterations.
// bench/bench_head.py runs this and torch in the same run and reports the ratios.
#include <benchmark/benchmark.h>

#include <random>
#include <vector>

#include "kev/head/pointer_head.h"

namespace {

constexpr size_t kD = 2560, kP = 256;

std::vector<float> uniform(size_t n, float a, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> dist(-a, a);
  std::vector<float> v(n);
  for (float& x : v) x = dist(rng);
  return v;
}

const kev::PointerHead& head() {
  static const kev::PointerHead h = [] {
    kev::PointerHeadWeights w;
    w.pointer_dim = kP;
    w.hidden = kD;
    w.q_weight = uniform(kP * kD, 0.06f, 1);
    w.q_bias = uniform(kP, 1, 2);
    w.k_weight = uniform(kP * kD, 0.06f, 3);
    w.k_bias = uniform(kP, 1, 4);
    return kev::PointerHead(std::move(w), 2.406050072164233);
  }();
  return h;
}

void run(benchmark::State& state, size_t questions, size_t options, kev::HeadIsa isa,
         size_t workers) {
  std::vector<std::vector<float>> dec, opt;
  std::vector<kev::HeadQuestion> qs;
  std::vector<size_t> counts(questions, options);
  for (size_t q = 0; q < questions; ++q) {
    dec.push_back(uniform(kD, 1, 10 + 2 * static_cast<uint32_t>(q)));
    opt.push_back(uniform(options * kD, 1, 11 + 2 * static_cast<uint32_t>(q)));
  }
  for (size_t q = 0; q < questions; ++q) qs.push_back({dec[q], opt[q], options});
  std::vector<float> logits(questions * options), probs(questions * options);
  kev::HeadWorkspace ws;
  for (auto _ : state) {
    head().project_batch(qs, logits, ws, isa, workers);
    head().calibrate_batch(counts, logits, probs);
    benchmark::DoNotOptimize(probs.data());
  }
  state.counters["questions_per_s"] = benchmark::Counter(
      static_cast<double>(questions), benchmark::Counter::kIsIterationInvariantRate);
}

void register_all() {
  struct Isa {
    const char* name;
    kev::HeadIsa isa;
  };
  for (Isa isa : {Isa{"auto", kev::HeadIsa::kAuto}, Isa{"avx2", kev::HeadIsa::kAvx2},
                  Isa{"portable", kev::HeadIsa::kPortable}}) {
    if (!kev::head_isa_supported(isa.isa)) continue;
    for (size_t workers : {size_t{0}, size_t{1}}) {
      std::string suffix = std::string("/") + isa.name + (workers ? "/1thread" : "/allthreads");
      benchmark::RegisterBenchmark(("head_1x255" + suffix).c_str(), run, 1, 255, isa.isa, workers)
          ->Unit(benchmark::kMicrosecond)
          ->UseRealTime();
      benchmark::RegisterBenchmark(("head_64x8" + suffix).c_str(), run, 64, 8, isa.isa, workers)
          ->Unit(benchmark::kMicrosecond)
          ->UseRealTime();
    }
  }
}

}  // namespace

int main(int argc, char** argv) {
  register_all();
  benchmark::Initialize(&argc, argv);
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
