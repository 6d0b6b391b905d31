#include "kev/model/gemm_avx512.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>

#include "kev/core/bf16.h"
#include "kev/core/error.h"
#include "kev/core/isa.h"
#include "kev/core/threads.h"
#include "model/avx512_ops.h"

namespace kev {
namespace {

constexpr int64_t kGroup = 16;  // outputs per packed group (the Int8Matrix layout too)

// One kernel body per implementation of the vector operations. Only the real instantiations
// carry target attributes, so the emulation's plain C++ can never be compiled into AVX-512 code.
namespace emu {
using V = avx512::EmuOps;
#define KEV_TARGET
#include "model/gemm_avx512_int8.inc"
#undef KEV_TARGET
}  // namespace emu

namespace vnni {
using V = avx512::Avx512VnniOps;
#define KEV_TARGET __attribute__((target("avx512f,avx512bw,avx512vnni")))
#include "model/gemm_avx512_int8.inc"
#undef KEV_TARGET
}  // namespace vnni

namespace bw {
using V = avx512::Avx512BwOps;
#define KEV_TARGET __attribute__((target("avx512f,avx512bw")))
#include "model/gemm_avx512_int8.inc"
#undef KEV_TARGET
}  // namespace bw

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

// Shapes with a K tail (cols % 32), an output tail (a lone and a partial group) and a row tail
// (7 = 6 + 1), plus blocks at the quantization range's ends.
constexpr int64_t kProbeRows = 7, kProbeCols = 99, kProbeOut = 72;

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

// The real int8 variant passes when it reproduces the portable kernel bit for bit.
bool probe_int8(Int8Kernel k) {
  const ProbeProblem p;
  const Int8Matrix q = quantize_int8(p.matrix(), 1);
  std::vector<float> want(kProbeRows * kProbeOut), got(want.size(), NAN);
  gemm_int8_kernel(Int8Kernel::kPortable, p.x.data(), kProbeRows, kProbeCols, q, want.data(),
                   kProbeOut, 1);
  gemm_int8_kernel(k, p.x.data(), kProbeRows, kProbeCols, q, got.data(), kProbeOut, 1);
  for (size_t i = 0; i < want.size(); ++i)
    if (std::memcmp(&want[i], &got[i], sizeof(float)) != 0) {
      char line[256];
      std::snprintf(line, sizeof line,
                    "the %s int8 kernel disagrees with the portable one on its start-up probe "
                    "(output %zu: %.9g, expected %.9g); using avx2 for this process",
                    int8_kernel_name(k), i, static_cast<double>(got[i]),
                    static_cast<double>(want[i]));
      report_probe_failure(line);
      return false;
    }
  return true;
}

// KEV_AVX512_EMULATE=1 (for tests on machines without AVX-512): the int8 mode dispatches
// to the emulated AVX-512 kernels, unless KEV_GEMM_ISA / KEV_ISA cap the level below avx512.
bool emulate_avx512() {
  const char* v = std::getenv("KEV_AVX512_EMULATE");
  if (v == nullptr || std::strcmp(v, "1") != 0) return false;
  for (const char* variable : {"KEV_GEMM_ISA", "KEV_ISA"}) {
    const char* cap = std::getenv(variable);
    if (cap != nullptr && *cap != '\0') return parse_isa(cap) == Isa::kAvx512;
  }
  return true;
}

// The AVX-512 int8 variant of this CPU after its probe (kAvx2 when it failed); needs kAvx512.
Int8Kernel avx512_int8_variant() {
  static const Int8Kernel k = [] {
    const Int8Kernel real = cpu_has_avx512_vnni() ? Int8Kernel::kAvx512Vnni : Int8Kernel::kAvx512Bw;
    return probe_int8(real) ? real : Int8Kernel::kAvx2;
  }();
  return k;
}

void range_int8(Int8Kernel k, const int16_t* xq, int64_t kp, const float* sx, int64_t rows,
                const Int8Matrix& w, float* y, int64_t ldy, int64_t g0, int64_t g1) {
  switch (k) {
    case Int8Kernel::kAvx512Vnni:
      vnni::int8_range(xq, kp, sx, rows, w, y, ldy, g0, g1);
      return;
    case Int8Kernel::kAvx512Bw:
      bw::int8_range(xq, kp, sx, rows, w, y, ldy, g0, g1);
      return;
    case Int8Kernel::kAvx512Emulated:
      emu::int8_range(xq, kp, sx, rows, w, y, ldy, g0, g1);
      return;
    default:
      fail(ErrorKind::kInternal, "int8_range_avx512: {} is not an AVX-512 kernel",
           int8_kernel_name(k));
  }
}

}  // namespace

// ---- int8 ----
const char* int8_kernel_name(Int8Kernel k) {
  switch (k) {
    case Int8Kernel::kAvx2:
      return "avx2";
    case Int8Kernel::kAvx512Bw:
      return "avx512bw";
    case Int8Kernel::kAvx512Vnni:
      return "avx512vnni";
    case Int8Kernel::kAvx512Emulated:
      return "avx512vnni-emulated";
    default:
      return "portable";
  }
}

bool int8_kernel_supported(Int8Kernel k) {
  switch (k) {
    case Int8Kernel::kAvx2:
      return isa_supported(Isa::kAvx2);
    case Int8Kernel::kAvx512Bw:
      return isa_supported(Isa::kAvx512);
    case Int8Kernel::kAvx512Vnni:
      return cpu_has_avx512_vnni();
    default:
      return true;
  }
}

Int8Kernel int8_kernel_for(Isa isa) {
  switch (isa) {
    case Isa::kAvx512:
      return avx512_int8_variant();
    case Isa::kAvx2:
      return Int8Kernel::kAvx2;
    default:
      return Int8Kernel::kPortable;
  }
}

Int8Kernel best_int8_kernel() {
  static const Int8Kernel k = emulate_avx512() ? Int8Kernel::kAvx512Emulated
                                               : int8_kernel_for(dispatch_isa("KEV_GEMM_ISA"));
  return k;
}

void int8_range_avx512(Int8Kernel k, const int16_t* xq, int64_t kp, const float* sx, int64_t rows,
                       const Int8Matrix& w, float* y, int64_t ldy, int64_t g0, int64_t g1) {
  range_int8(k, xq, kp, sx, rows, w, y, ldy, g0, g1);
}

std::string avx512_probe_note() {
  std::lock_guard<std::mutex> lock(note_mutex);
  return probe_note;
}

}  // namespace kev
