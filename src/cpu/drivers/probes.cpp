// The start-up probes of the precision-mode kernels (precision_kernels.h, "Safety net"): a small
// fixed problem each real kernel must solve like the portable kernel (int8: bit for bit) or within
// its error bound (bf16) before its family folder lets it run. Architecture-free, so the tests run
// them on the emulations on every machine.
#include <cmath>
#include <cstdio>
#include <cstring>
#include <mutex>
#include <string>
#include <vector>

#include "cpu/drivers/precision_variants.h"
#include "kev/core/bf16.h"
#include "kev/cpu/precision_kernels.h"

namespace kev {
namespace {

std::mutex note_mutex;
std::string probe_note;

void report_probe_failure(const std::string& line) {
  std::fprintf(stderr, "kev: %s\n", line.c_str());
  std::lock_guard<std::mutex> lock(note_mutex);
  if (!probe_note.empty()) probe_note += "; ";
  probe_note += line;
}

// The probes' fixed inputs: a small linear congruential sequence, so the problem is the same on
// every machine without depending on <random>'s distributions.
struct Lcg {
  uint32_t s;
  float next() {  // in [-1, 1)
    s = s * 1664525u + 1013904223u;
    return static_cast<float>(s >> 8) * (1.0f / 8388608.0f) - 1.0f;
  }
};

// Shapes with a K tail (cols % 32, odd cols), an output tail (a lone and a partial group) and a
// row tail (37 = 6 * 6 + 1, and 32 + 5 for the AMX kernel's steps of 32 rows), plus blocks at the
// quantization range's ends.
constexpr int64_t kProbeRows = 37, kProbeCols = 99, kProbeOut = 72;

struct ProbeProblem {
  std::vector<float> x;
  std::vector<uint16_t> w;
  ProbeProblem() : x(kProbeRows * kProbeCols), w(kProbeOut * kProbeCols) {
    Lcg g{12345};
    for (auto& v : x) v = 4.0f * g.next();
    for (auto& v : w) v = f32_to_bf16(0.25f * g.next());
    for (int64_t k = 0; k < 32; ++k) {  // row 0, block 0: every activation at +-32767
      x[static_cast<size_t>(k)] = (k % 3 == 0) ? -8.0f : 8.0f;
      w[static_cast<size_t>(k)] = f32_to_bf16((k % 5 == 0) ? -1.0f : 1.0f);  // and weights +-127
    }
  }
  Bf16Matrix matrix() const { return {w.data(), kProbeOut, kProbeCols}; }
};

// The real int8 variant passes when it reproduces the portable kernel bit for bit (a byte
// kernel with 8-bit activations, every other one with 16-bit).
bool probe_int8(Int8Kernel k) {
  const ProbeProblem p;
  const Int8Matrix q = quantize_int8(p.matrix(), 1);
  const ActivationWidth width =
      int8_kernel_reads_bytes(k) ? ActivationWidth::k8Bit : ActivationWidth::k16Bit;
  std::vector<float> want(kProbeRows * kProbeOut), got(want.size(), NAN);
  gemm_int8_kernel(kPortableInt8Kernel, p.x.data(), kProbeRows, kProbeCols, q, want.data(),
                   kProbeOut, 1, width);
  gemm_int8_kernel(k, p.x.data(), kProbeRows, kProbeCols, q, got.data(), kProbeOut, 1, width);
  for (size_t i = 0; i < want.size(); ++i)
    if (std::memcmp(&want[i], &got[i], sizeof(float)) != 0) {
      char line[256];
      std::snprintf(line, sizeof line,
                    "the %s int8 kernel disagrees with the portable one on its start-up probe "
                    "(output %zu: %.9g, expected %.9g); using %s for this process",
                    int8_kernel_name(k), i, static_cast<double>(got[i]),
                    static_cast<double>(want[i]),
                    int8_kernel_reads_bytes(k) ? "the int16 kernel" : "avx2");
      report_probe_failure(line);
      return false;
    }
  return true;
}

// The real bf16 variant passes when every output is within precision_kernels.h's bound of a float64
// evaluation of the same BF16 operands (the inputs hold no denormals).
bool probe_bf16(Bf16Kernel k) {
  const ProbeProblem p;
  const Bf16PairMatrix pm = pack_bf16_pairs(p.matrix(), 1);
  std::vector<float> got(kProbeRows * kProbeOut, NAN);
  gemm_bf16_pairs(k, p.x.data(), kProbeRows, kProbeCols, pm, got.data(), kProbeOut, 1);
  for (int64_t m = 0; m < kProbeRows; ++m)
    for (int64_t n = 0; n < kProbeOut; ++n) {
      double sum = 0.0, mag = 0.0;
      for (int64_t k = 0; k < kProbeCols; ++k) {
        const double t = static_cast<double>(bf16_to_f32(f32_to_bf16(p.x[m * kProbeCols + k]))) *
                         static_cast<double>(bf16_to_f32(p.w[n * kProbeCols + k]));
        sum += t;
        mag += std::fabs(t);
      }
      const double y = got[static_cast<size_t>(m * kProbeOut + n)];
      const double bound = static_cast<double>(kProbeCols) * std::ldexp(1.0, -24) * mag * 1.01;
      if (!(std::fabs(y - sum) <= bound)) {
        char line[256];
        std::snprintf(line, sizeof line,
                      "the %s kernel is outside its error bound on its start-up probe "
                      "(row %lld, output %lld: %.9g, float64 %.9g, bound %.3g); using the avx2 "
                      "bf16 path for this process",
                      bf16_kernel_name(k), static_cast<long long>(m), static_cast<long long>(n), y,
                      sum, bound);
        report_probe_failure(line);
        return false;
      }
    }
  return true;
}

}  // namespace

bool probe_kernel(Int8Kernel k) {
  return probe_int8(k);
}
bool probe_kernel(Bf16Kernel k) {
  return probe_bf16(k);
}

std::string kernel_probe_note() {
  std::lock_guard<std::mutex> lock(note_mutex);
  return probe_note;
}

}  // namespace kev
