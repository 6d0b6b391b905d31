// GEMM benchmark without a model: gemm_bf16 at the projection shapes of Kev-4B and
// Qwen3.5-0.8B (512-token prefill unless given), for one forced ISA, against the measured FP32
// FMA peak of that ISA on the same cores.
//
// Usage: bench_gemm [--isa scalar|avx2|avx512] [--threads N] [--reps R] [--m M]
//                   [--int8 | --int8-kernel NAME | --bf16-dot | --bf16-kernel NAME]
//                   [NAME=MxKxN ...]
// --int8: gemm_int8 (weights quantized first, untimed; activation quantization timed) instead;
// its "gflops" count 2 per multiply-add as for FP32. The kernel line names the int8 variant
// (e.g. avx512vnni). --int8-kernel NAME: the same through one named int8 kernel (`kev cpu`'s
// gemm_int8_kernel names, e.g. avx512vnni or amxint8; avx512vnni-a8 with 8-bit activations),
// refused where the CPU cannot run it.
// --bf16-dot: the dot kernel of `--precision bf16` (`kev cpu`'s gemm_bf16_dot: amxbf16 or
// avx512bf16; precision_kernels.h; weights packed first, untimed; activation rounding timed);
// refused where the CPU has none (on other CPUs the bf16 mode is the FP32 GEMM on rounded
// activations). --bf16-kernel NAME: the same through one named dot kernel. Default ISA: the
// dispatcher's (best_gemm_isa, capped by KEV_GEMM_ISA). An ISA the CPU lacks is refused. Prints
// one JSON object per line: per shape the best of R timed runs.
#include <chrono>
#include <cstdio>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "fma_peak.h"
#include "kev/core/bf16.h"
#include "kev/core/threads.h"
#include "kev/cpu/gemm.h"
#include "kev/cpu/gemm_int8.h"
#include "kev/cpu/precision_kernels.h"

using namespace kev;

namespace {

struct Shape {
  std::string name;
  int64_t m, k, n;
};

std::vector<Shape> default_shapes(int64_t m) {
  return {
      // Kev-4B: H 2560, I 9216, GDN 16 key / 32 value heads of 128, attention 16 x 256.
      {"4b.mlp_up", m, 2560, 9216},
      {"4b.mlp_down", m, 9216, 2560},
      {"4b.gdn_qkv", m, 2560, 8192},
      {"4b.gdn_z", m, 2560, 4096},
      {"4b.gdn_out", m, 4096, 2560},
      {"4b.attn_kv", m, 2560, 1024},
      {"4b.gdn_a", m, 2560, 32},
      // Qwen3.5-0.8B: H 1024, I 3584, GDN 16 / 16 heads of 128.
      {"0.8b.mlp_up", m, 1024, 3584},
      {"0.8b.mlp_down", m, 3584, 1024},
      {"0.8b.gdn_qkv", m, 1024, 6144},
      {"0.8b.gdn_out", m, 2048, 1024},
  };
}

}  // namespace

int main(int argc, char** argv) {
  Isa isa = best_gemm_isa();
  size_t threads = default_workers();
  int reps = 5;
  int64_t m = 512;
  bool int8 = false, bf16_dot = false;
  std::optional<Bf16Kernel> bf16_kernel;
  std::optional<Int8Kernel> int8_kernel;
  std::vector<Shape> shapes;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    auto next = [&]() -> std::string {
      if (i + 1 >= argc) {
        std::fprintf(stderr, "bench_gemm: %s needs a value\n", a.c_str());
        std::exit(2);
      }
      return argv[++i];
    };
    if (a == "--isa") {
      std::string v = next();
      std::optional<Isa> parsed = parse_isa(v);
      if (!parsed) {
        std::fprintf(stderr, "bench_gemm: unknown ISA %s (portable, avx2 or avx512)\n", v.c_str());
        return 2;
      }
      isa = *parsed;
    } else if (a == "--threads") {
      threads = std::stoul(next());
    } else if (a == "--reps") {
      reps = std::stoi(next());
    } else if (a == "--int8") {
      int8 = true;
    } else if (a == "--int8-kernel") {
      std::string v = next();
      int8_kernel = find_int8_kernel(v);
      if (!int8_kernel || !int8_kernel_supported(*int8_kernel)) {
        std::fprintf(stderr, "bench_gemm: no int8 kernel %s that this CPU runs\n", v.c_str());
        return 2;
      }
      int8 = true;
    } else if (a == "--bf16-dot") {
      bf16_dot = true;
    } else if (a == "--bf16-kernel") {
      std::string v = next();
      bf16_kernel = find_bf16_kernel(v);
      if (!bf16_kernel || *bf16_kernel == kNoBf16Kernel || !bf16_kernel_supported(*bf16_kernel)) {
        std::fprintf(stderr, "bench_gemm: no bf16 dot kernel %s that this CPU runs\n", v.c_str());
        return 2;
      }
      bf16_dot = true;
    } else if (a == "--m") {
      m = std::stoll(next());
    } else {
      Shape s;
      auto eq = a.find('=');
      s.name = a.substr(0, eq);
      if (eq == std::string::npos ||
          std::sscanf(a.c_str() + eq + 1, "%ldx%ldx%ld", &s.m, &s.k, &s.n) != 3) {
        std::fprintf(stderr, "bench_gemm: shape must be NAME=MxKxN, got %s\n", a.c_str());
        return 2;
      }
      shapes.push_back(s);
    }
  }
  if (!isa_supported(isa)) {
    std::fprintf(stderr, "bench_gemm: this CPU lacks %s\n", isa_name(isa));
    return 2;
  }
  if (bf16_dot && !bf16_kernel) bf16_kernel = best_bf16_kernel();
  if (bf16_dot && (int8 || *bf16_kernel == kNoBf16Kernel)) {
    std::fprintf(stderr,
                 "bench_gemm: --bf16-dot needs a bf16 dot kernel (an AVX512-BF16 or AMX-BF16 CPU, "
                 "--isa avx512, no --int8); `kev cpu` shows gemm_bf16_dot\n");
    return 2;
  }
  if (shapes.empty()) shapes = default_shapes(m);
  if (int8 && !int8_kernel) int8_kernel = int8_kernel_for(isa);
  // A byte kernel multiplies 8-bit activations (w8a8); every other one 16-bit (int8).
  const ActivationWidth width = int8 && int8_kernel_reads_bytes(*int8_kernel)
                                    ? ActivationWidth::k8Bit
                                    : ActivationWidth::k16Bit;
  const std::string kernel = int8       ? std::string("int8 ") + int8_kernel_name(*int8_kernel)
                             : bf16_dot ? std::string("bf16 dot ") + bf16_kernel_name(*bf16_kernel)
                                        : std::string("bf16-weight fp32");

  bench::Peak peak = bench::fma_peak_gflops(isa, threads);
  std::printf(
      "{\"isa\": \"%s\", \"kernel\": \"%s\", \"threads\": %zu, \"fma_peak_gflops\": %.2f, "
      "\"fma_peak_cpu_gflops\": %.2f}\n",
      isa_name(isa), kernel.c_str(), threads, peak.wall, peak.cpu);
  std::fflush(stdout);
  std::mt19937 rng(1);
  std::uniform_real_distribution<float> d(-1, 1);
  double flop_all = 0, sec_all = 0, cpu_all = 0;
  for (const Shape& s : shapes) {
    std::vector<float> x(static_cast<size_t>(s.m * s.k)), y(static_cast<size_t>(s.m * s.n));
    std::vector<uint16_t> w(static_cast<size_t>(s.n * s.k));
    for (auto& v : x) v = d(rng);
    for (auto& v : w) v = f32_to_bf16(d(rng) * 0.05f);
    Bf16Matrix mat{w.data(), s.n, s.k};
    Int8Matrix q;
    if (int8) q = quantize_int8(mat, threads);
    Bf16PairMatrix pairs;
    if (bf16_dot) pairs = pack_bf16_pairs(mat, threads);
    auto run = [&] {
      if (int8)
        gemm_int8_kernel(*int8_kernel, x.data(), s.m, s.k, q, y.data(), s.n, threads, width);
      else if (bf16_dot)
        gemm_bf16_pairs(*bf16_kernel, x.data(), s.m, s.k, pairs, y.data(), s.n, threads);
      else
        gemm_bf16_isa(isa, x.data(), s.m, s.k, mat, y.data(), s.n, threads);
    };
    run();  // warm
    double best = 1e30, best_cpu = 1e30;
    for (int r = 0; r < reps; ++r) {
      auto t0 = std::chrono::steady_clock::now();
      double c0 = bench::detail::process_cpu_seconds();
      run();
      best = std::min(best, bench::detail::seconds_since(t0));
      best_cpu = std::min(best_cpu, bench::detail::process_cpu_seconds() - c0);
    }
    double flop = 2.0 * double(s.m) * double(s.k) * double(s.n);
    flop_all += flop;
    sec_all += best;
    cpu_all += best_cpu;
    // cpu_fraction: GFLOP per CPU-second of all threads against the per-CPU-second peak, i.e.
    // the kernel's efficiency on the cycles it got (robust to other load on the machine).
    std::printf(
        "{\"shape\": \"%s\", \"m\": %ld, \"k\": %ld, \"n\": %ld, \"best_s\": %.5f, "
        "\"gflops\": %.2f, \"fraction_of_peak\": %.3f, \"cpu_s\": %.5f, \"cpu_fraction\": %.3f}\n",
        s.name.c_str(), s.m, s.k, s.n, best, flop / best / 1e9,
        peak.wall > 0 ? flop / best / 1e9 / peak.wall : 0.0, best_cpu,
        peak.cpu > 0 ? flop / best_cpu / 1e9 / peak.cpu * static_cast<double>(threads) : 0.0);
    std::fflush(stdout);
  }
  std::printf(
      "{\"all_shapes_gflops\": %.2f, \"fraction_of_peak\": %.3f, \"cpu_fraction\": %.3f}\n",
      flop_all / sec_all / 1e9, peak.wall > 0 ? flop_all / sec_all / 1e9 / peak.wall : 0.0,
      peak.cpu > 0 ? flop_all / cpu_all / 1e9 / peak.cpu * static_cast<double>(threads) : 0.0);
  return 0;
}
