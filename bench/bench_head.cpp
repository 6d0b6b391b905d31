// Pointer head at Kev-4B size (d = 2560, p = 256): one 255-option question, and a batch of 64
// questions x 8 options; projection + calibration, workspace reused across iterations.
// bench/bench_head.py runs this and torch in the same run and reports the ratios.
#include <benchmark/benchmark.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
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

// One benchmark case: inputs, outputs and a workspace reused by every call.
struct Case {
  std::vector<std::vector<float>> dec, opt;
  std::vector<kev::HeadQuestion> qs;
  std::vector<size_t> counts;
  std::vector<float> logits, probs;
  kev::HeadWorkspace ws;

  Case(size_t questions, size_t options) : counts(questions, options) {
    for (size_t q = 0; q < questions; ++q) {
      dec.push_back(uniform(kD, 1, 10 + 2 * static_cast<uint32_t>(q)));
      opt.push_back(uniform(options * kD, 1, 11 + 2 * static_cast<uint32_t>(q)));
    }
    for (size_t q = 0; q < questions; ++q) qs.push_back({dec[q], opt[q], options});
    logits.resize(questions * options);
    probs.resize(questions * options);
  }
  void call(kev::Isa isa, size_t workers) {
    head().project_batch(qs, logits, ws, isa, workers);
    head().calibrate_batch(counts, logits, probs);
    benchmark::DoNotOptimize(probs.data());
  }
};

void run(benchmark::State& state, size_t questions, size_t options, kev::Isa isa, size_t workers) {
  Case c(questions, options);
  for (auto _ : state) c.call(isa, workers);
  state.counters["questions_per_s"] = benchmark::Counter(
      static_cast<double>(questions), benchmark::Counter::kIsIterationInvariantRate);
}

void register_all() {
  struct Variant {
    const char* name;
    kev::Isa isa;
  };
  // The dispatched level, the one below it where the family has one, and portable.
  const kev::Isa best = kev::head_isa();
  const kev::Isa below =
      kev::arch_isas()[static_cast<size_t>(best.rank() > 1 ? best.rank() - 1 : 0)];
  for (Variant isa : {Variant{"auto", best}, Variant{kev::isa_name(below), below},
                      Variant{"portable", kev::Isa::kPortable}}) {
    if (!kev::isa_supported(isa.isa) || (isa.isa == below && below == kev::Isa::kPortable))
      continue;
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

// `bench_head --samples N`: N timed calls per case (auto ISA), printed as JSON
// {"head_1x255/allthreads": [us, ...], ...}, for bench_head.py's per-call median / minimum.
int samples_mode(int n) {
  std::string out = "{";
  for (auto [questions, options] : {std::pair<size_t, size_t>{1, 255}, {64, 8}}) {
    Case c(questions, options);
    for (size_t workers : {size_t{0}, size_t{1}}) {
      c.call(kev::head_isa(), workers);  // warm-up
      if (out.size() > 1) out += ",";
      out += "\"head_";
      out += std::to_string(questions);
      out += 'x';
      out += std::to_string(options);
      out += workers ? "/1thread\":[" : "/allthreads\":[";
      for (int i = 0; i < n; ++i) {
        auto t0 = std::chrono::steady_clock::now();
        c.call(kev::head_isa(), workers);
        std::chrono::duration<double, std::micro> us = std::chrono::steady_clock::now() - t0;
        if (i) out += ',';
        out += std::to_string(us.count());
      }
      out += "]";
    }
  }
  std::printf("%s}\n", out.c_str());
  return 0;
}

int main(int argc, char** argv) {
  if (argc == 3 && std::strcmp(argv[1], "--samples") == 0) return samples_mode(std::atoi(argv[2]));
  register_all();
  benchmark::Initialize(&argc, argv);
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
