// Backbone benchmark: prefill of a state and of rows continuing from it, plus GEMM throughput
// on the model's real shapes against the machine's measured peak (an FMA register loop) and
// OpenBLAS sgemm on FP32 copies of the same weights (loaded with dlopen, so no build change).
// The peak is measured for the GEMM's own ISA (bench/fma_peak.h: the CPU family's probe, 0 where
// it has none): no AVX-512 code runs on a CPU without it. The prefill is also given as a fraction
// of its mode's own peak: that of the product instruction of the kernel the mode runs (bf16:
// tdpbf16ps or vdpbf16ps; int8: vpdpwssd or tdpbusd; w8a8: vpdpbusd on zmm, AVX-VNNI's on ymm,
// or aarch64's sdot; fp32 and a bf16 without a dot kernel: FMA; 0 unknown).
//
// Usage: bench_model MODEL_DIR [state_tokens=512] [rows=8] [row_tokens=64] [chunked]
//                    [fp32|bf16|int8|w8a8]
// (the last two anywhere after MODEL_DIR: GDN form, ForwardOptions::precision; load_s includes
// the int8 quantization). Prints one JSON object on stdout.
#include <dlfcn.h>

#include <chrono>
#include <cstdio>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "fma_peak.h"
#include "kev/core/bf16.h"
#include "kev/core/threads.h"
#include "kev/cpu/gemm.h"
#include "kev/cpu/model_kernels.h"
#include "kev/model/model.h"

using namespace kev;
using Clock = std::chrono::steady_clock;

// The peak a mode's projections can reach here: the product instruction of the kernel the mode
// runs (fp32 and bf16 without a dot kernel: the GEMM ISA's FMA), in operations (2 a product) per
// second of the mode's own products; zero where unknown (no probe, or an emulated kernel).
struct ModePeak {
  std::string kernel, instruction;
  bench::Peak peak;
};

static ModePeak mode_peak(Precision p) {
  const ModelKernels& k = model_kernels();
  const size_t threads = default_workers();
  const auto fma = [&](std::string kernel) {
    return ModePeak{std::move(kernel), "fma", bench::fma_peak_gflops(best_gemm_isa(), threads)};
  };
  const auto dot = [&](std::string kernel, DotProbe probe, double per_product) {
    bench::Peak r = bench::dot_peak_gops(probe, threads);
    r.wall *= per_product, r.cpu *= per_product;
    return ModePeak{std::move(kernel), dot_probe_name(probe), r};
  };
  if (p == Precision::kBf16) {
    const std::string name = bf16_kernel_name(k.bf16_kernel());
    if (name == "none") return fma(name);
    if (name == "avx512bf16") return dot(name, DotProbe::kBf16Pairs, 1);
    if (name == "amxbf16") return dot(name, DotProbe::kAmxBf16, 1);
    return {name, "unknown", {}};
  }
  if (runs_int8_weights(p)) {
    const std::string name = int8_kernel_name(
        k.int8_kernel(p == Precision::kW8A8 ? ActivationWidth::k8Bit : ActivationWidth::k16Bit));
    if (name == "avx512vnni") return dot(name, DotProbe::kInt16Pairs, 1);
    if (name == "avx512vnni-a8") return dot(name, DotProbe::kInt8Quads, 1);
    if (name == "avxvnni-a8") return dot(name, DotProbe::kInt8QuadsYmm, 1);
    if (name == "neon-dotprod") return dot(name, DotProbe::kInt8Sdot, 1);
    // amxint8 multiplies each int16 activation as two bytes: two tile products per product.
    if (name == "amxint8") return dot(name, DotProbe::kAmxInt8, 0.5);
    return {name, "unknown", {}};
  }
  return fma(isa_name(best_gemm_isa()));
}

static double secs(Clock::time_point a) {
  return std::chrono::duration<double>(Clock::now() - a).count();
}

using SgemmFn = void (*)(int, int, int, int, int, int, float, const float*, int, const float*, int,
                         float, float*, int);

static int usage(const char* why) {
  if (why) std::fprintf(stderr, "bench_model: %s\n", why);
  std::fprintf(stderr,
               "usage: bench_model MODEL_DIR [state_tokens=512] [rows=8] [row_tokens=64] "
               "[chunked] [fp32|bf16|int8|w8a8]\n");
  return 2;
}

int main(int argc, char** argv) {
  if (argc < 2 || std::strcmp(argv[1], "-h") == 0 || std::strcmp(argv[1], "--help") == 0)
    return usage(nullptr);
  std::string dir = argv[1];
  // The numbers in order (state_tokens, rows, row_tokens); the words anywhere after MODEL_DIR.
  int64_t numbers[3] = {512, 8, 64};
  int given = 0;
  ForwardOptions opts;
  for (int i = 2; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "chunked") {
      opts.gdn = GdnMode::kChunked;
    } else if (a == "fp32" || a == "bf16" || a == "int8" || a == "w8a8") {
      opts.precision = parse_precision(a);
    } else if (!a.empty() && a.find_first_not_of("0123456789") == std::string::npos && given < 3 &&
               a.size() < 9 && std::stoll(a) > 0) {
      numbers[given++] = std::stoll(a);
    } else {
      return usage(("not a count or an option: " + a).c_str());
    }
  }
  const int64_t state_n = numbers[0], rows_n = numbers[1], row_len = numbers[2];
  auto t_load = Clock::now();
  auto model = Model::load(dir, opts);
  double load_s = secs(t_load);
  const ModelConfig& c = model->config();
  std::mt19937 rng(1);
  std::uniform_int_distribution<int32_t> tok(
      0, static_cast<int32_t>(std::min<int64_t>(c.vocab, 240000) - 1));
  std::vector<int32_t> state_ids(static_cast<size_t>(state_n));
  for (auto& t : state_ids) t = tok(rng);
  std::vector<RowRequest> rows(static_cast<size_t>(rows_n));
  for (auto& r : rows) {
    r.ids.resize(static_cast<size_t>(row_len));
    for (auto& t : r.ids) t = tok(rng);
    r.readout = {row_len - 1};
  }
  // Warm the page cache / mapping once (first touch of the mmap).
  model->run_rows(model->empty_state(), {RowRequest{{1, 2, 3, 4}, {}, {}}});
  auto t0 = Clock::now();
  double c0 = bench::detail::process_cpu_seconds();
  PrefixState st = model->extend(model->empty_state(), state_ids);
  double prefill_s = secs(t0), prefill_cpu_s = bench::detail::process_cpu_seconds() - c0;
  t0 = Clock::now();
  auto res = model->run_rows(st, rows);
  double rows_s = secs(t0);

  // Matrix FLOPs per token (2 per weight, embeddings excluded).
  double params = 0;
  for (const auto& l : model->weights().layers()) {
    auto add = [&](const Bf16Matrix& m) { params += double(m.rows) * double(m.cols); };
    add(l.gate), add(l.up), add(l.down);
    if (l.full_attention)
      add(l.attn.q), add(l.attn.k), add(l.attn.v), add(l.attn.o);
    else
      add(l.gdn.qkv), add(l.gdn.z), add(l.gdn.a), add(l.gdn.b), add(l.gdn.out);
  }
  const double flop_tok = 2 * params;

  // GEMM alone on the MLP up-projection shape with M = state tokens.
  const LayerWeights& l0 = model->weights().layers()[0];
  const int64_t m = state_n, k = l0.up.cols, n = l0.up.rows;
  std::vector<float> x(static_cast<size_t>(m * k)), y(static_cast<size_t>(m * n));
  for (auto& v : x) v = std::uniform_real_distribution<float>(-1, 1)(rng);
  gemm_bf16(x.data(), m, k, l0.up, y.data(), n);
  t0 = Clock::now();
  c0 = bench::detail::process_cpu_seconds();
  const int reps = 5;
  for (int r = 0; r < reps; ++r) gemm_bf16(x.data(), m, k, l0.up, y.data(), n);
  double gemm_gflops = reps * 2.0 * m * k * n / secs(t0) / 1e9;
  double gemm_cpu_gflops =
      reps * 2.0 * m * k * n / (bench::detail::process_cpu_seconds() - c0) / 1e9;

  double blas_gflops = -1;
  if (void* h = dlopen("libopenblas.so.0", RTLD_NOW)) {
    if (auto sgemm = reinterpret_cast<SgemmFn>(dlsym(h, "cblas_sgemm"))) {
      std::vector<float> wf(static_cast<size_t>(n * k));
      for (size_t i = 0; i < wf.size(); ++i) {
        uint16_t b;
        std::memcpy(&b, l0.up.data + i, 2);
        wf[i] = bf16_to_f32(b);
      }
      // RowMajor=101, NoTrans=111, Trans=112: y[m,n] = x[m,k] * W[n,k]^T
      sgemm(101, 111, 112, int(m), int(n), int(k), 1.0f, x.data(), int(k), wf.data(), int(k), 0.0f,
            y.data(), int(n));
      t0 = Clock::now();
      for (int r = 0; r < reps; ++r)
        sgemm(101, 111, 112, int(m), int(n), int(k), 1.0f, x.data(), int(k), wf.data(), int(k),
              0.0f, y.data(), int(n));
      blas_gflops = reps * 2.0 * m * k * n / secs(t0) / 1e9;
    }
  }
  // The peak of the ISA the GEMM runs with (an AVX2 machine gets the AVX2 probe).
  bench::Peak peak = bench::fma_peak_gflops(best_gemm_isa(), default_workers());
  const ModePeak own = mode_peak(opts.precision);
  const double prefill_gflops = flop_tok * state_n / prefill_s / 1e9;
  const auto fraction = [&](double of) { return of > 0 ? prefill_gflops / of : 0.0; };
  std::printf(
      "{\"isa\": \"%s\", \"precision\": \"%s\", \"threads\": %zu, \"load_s\": %.3f, "
      "\"state_tokens\": %lld, "
      "\"prefill_s\": %.4f, "
      "\"prefill_tok_s\": %.2f, \"prefill_cpu_s\": %.4f, \"rows\": %lld, \"row_tokens\": %lld, "
      "\"rows_s\": %.4f, "
      "\"rows_tok_s\": %.2f, "
      "\"matrix_gflop_per_token\": %.4f, \"prefill_gflops\": %.2f, \"rows_gflops\": %.2f, "
      "\"gemm_shape\": [%lld, %lld, %lld], \"gemm_gflops\": %.2f, \"gemm_cpu_gflops\": %.2f, "
      "\"openblas_sgemm_gflops\": %.2f, "
      "\"fma_peak_gflops\": %.2f, \"fma_peak_cpu_gflops\": %.2f, "
      "\"prefill_fraction_of_fma_peak\": %.3f, \"mode_kernel\": \"%s\", "
      "\"mode_instruction\": \"%s\", \"mode_peak_gops\": %.2f, \"mode_peak_cpu_gops\": %.2f, "
      "\"prefill_fraction_of_mode_peak\": %.3f}\n",
      isa_name(best_gemm_isa()), precision_name(opts.precision), default_workers(), load_s,
      (long long)state_n, prefill_s, state_n / prefill_s, prefill_cpu_s, (long long)rows_n,
      (long long)row_len, rows_s, rows_n * row_len / rows_s, flop_tok / 1e9, prefill_gflops,
      flop_tok * rows_n * row_len / rows_s / 1e9, (long long)m, (long long)k, (long long)n,
      gemm_gflops, gemm_cpu_gflops, blas_gflops, peak.wall, peak.cpu, fraction(peak.wall),
      own.kernel.c_str(), own.instruction.c_str(), own.peak.wall, own.peak.cpu,
      fraction(own.peak.wall));
  return res.empty() ? 1 : 0;
}
