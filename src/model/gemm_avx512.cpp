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

constexpr int64_t kGroup = kInt8Group;  // outputs per packed group (Bf16PairMatrix's too)
constexpr int64_t kBf16TileRows = 6;

// One kernel body per implementation of the vector operations. Only the real instantiations
// carry target attributes, so the emulation's plain C++ can never be compiled into AVX-512 code.
namespace emu {
using V = avx512::EmuOps;
#define KEV_TARGET
#include "model/gemm_avx512_bf16.inc"
#include "model/gemm_avx512_int8.inc"
#undef KEV_TARGET
}  // namespace emu

#if KEV_X86
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

namespace bf16 {
using V = avx512::Avx512Bf16Ops;
#define KEV_TARGET __attribute__((target("avx512f,avx512bw,avx512bf16")))
#include "model/gemm_avx512_bf16.inc"
#undef KEV_TARGET
}  // namespace bf16
#endif  // KEV_X86

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
// row tail (7 = 6 + 1), plus blocks at the quantization range's ends.
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

// The real bf16 variant passes when every output is within gemm_avx512.h's bound of a float64
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

// KEV_AVX512_EMULATE=1 (for tests on machines without AVX-512): the int8 and bf16 modes dispatch
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
#if KEV_X86
    case Int8Kernel::kAvx512Vnni:
      vnni::int8_range(xq, kp, sx, rows, w, y, ldy, g0, g1);
      return;
    case Int8Kernel::kAvx512Bw:
      bw::int8_range(xq, kp, sx, rows, w, y, ldy, g0, g1);
      return;
#endif
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
    case Int8Kernel::kNeon:
      return "neon";
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
    case Int8Kernel::kNeon:
      return isa_supported(Isa::kNeon);
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
    case Isa::kNeon:
      return Int8Kernel::kNeon;
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

// ---- bf16 ----
const char* bf16_kernel_name(Bf16Kernel k) {
  switch (k) {
    case Bf16Kernel::kAvx512Bf16:
      return "avx512bf16";
    case Bf16Kernel::kAvx512Emulated:
      return "avx512bf16-emulated";
    default:
      return "none";
  }
}

bool bf16_kernel_supported(Bf16Kernel k) {
  return k != Bf16Kernel::kAvx512Bf16 || cpu_has_avx512_bf16();
}

Bf16Kernel best_bf16_kernel() {
  static const Bf16Kernel k = [] {
    if (emulate_avx512()) return Bf16Kernel::kAvx512Emulated;
    if (dispatch_isa("KEV_GEMM_ISA") != Isa::kAvx512 || !cpu_has_avx512_bf16())
      return Bf16Kernel::kNone;
    return probe_bf16(Bf16Kernel::kAvx512Bf16) ? Bf16Kernel::kAvx512Bf16 : Bf16Kernel::kNone;
  }();
  return k;
}

Bf16PairMatrix pack_bf16_pairs(const Bf16Matrix& m, size_t threads) {
  Bf16PairMatrix p;
  p.rows = m.rows;
  p.cols = m.cols;
  p.pairs = (m.cols + 1) / 2;
  p.groups = (m.rows + kGroup - 1) / kGroup;
  p.w.assign(static_cast<size_t>(p.groups * p.pairs * kGroup * 2), 0);
  parallel_for(
      static_cast<size_t>(p.groups),
      [&](size_t gi) {
        const int64_t g = static_cast<int64_t>(gi);
        for (int64_t j = 0; j < kGroup && g * kGroup + j < m.rows; ++j) {
          const uint16_t* src = m.data + (g * kGroup + j) * m.cols;
          uint16_t* dst = p.w.data() + (g * p.pairs * kGroup + j) * 2;
          for (int64_t k = 0; k < m.cols; ++k)  // the mapping may be unaligned
            std::memcpy(dst + (k / 2) * kGroup * 2 + k % 2, src + k, 2);
        }
      },
      threads == 0 ? default_workers() : threads);
  return p;
}

void gemm_bf16_pairs(Bf16Kernel k, const float* x, int64_t rows, int64_t ldx,
                     const Bf16PairMatrix& w, float* y, int64_t ldy, size_t threads) {
  if (k == Bf16Kernel::kNone || !bf16_kernel_supported(k))
    fail(ErrorKind::kUnsupported, "this CPU cannot run the {} bf16 kernel", bf16_kernel_name(k));
  if (rows <= 0 || w.rows <= 0) return;
  if (threads == 0) threads = default_workers();
  const int64_t ldxq = w.pairs * 2;
  const int64_t rows_padded = (rows + kBf16TileRows - 1) / kBf16TileRows * kBf16TileRows;
  thread_local std::vector<uint16_t> tl;
  std::vector<uint16_t>& xq = tl;  // the workers must see this thread's buffer, not their own
  xq.assign(static_cast<size_t>(rows_padded * ldxq), 0);
  parallel_for(
      static_cast<size_t>(rows),
      [&](size_t r) {
        const float* src = x + static_cast<int64_t>(r) * ldx;
        uint16_t* dst = xq.data() + static_cast<int64_t>(r) * ldxq;
        for (int64_t i = 0; i < w.cols; ++i) dst[i] = f32_to_bf16(src[i]);
      },
      threads);
  // Output groups in chunks, more chunks than threads so uneven cores finish together.
  const int64_t chunks = static_cast<int64_t>(threads) * 4;
  // Whole tiles of 4 groups per chunk, so only the matrix's last tile is a narrow one.
  const int64_t per = std::max<int64_t>(4, (w.groups + chunks - 1) / chunks + 3) / 4 * 4;
  const int64_t count = (w.groups + per - 1) / per;
  parallel_for(
      static_cast<size_t>(count),
      [&](size_t c) {
        const int64_t g0 = static_cast<int64_t>(c) * per, g1 = std::min(w.groups, g0 + per);
#if KEV_X86
        if (k == Bf16Kernel::kAvx512Bf16)
          return bf16::bf16_range(xq.data(), ldxq, rows, w, y, ldy, g0, g1);
#endif
        emu::bf16_range(xq.data(), ldxq, rows, w, y, ldy, g0, g1);
      },
      threads);
}

bool probe_avx512_kernel(Int8Kernel k) {
  return probe_int8(k);
}
bool probe_avx512_kernel(Bf16Kernel k) {
  return probe_bf16(k);
}

std::string avx512_probe_note() {
  std::lock_guard<std::mutex> lock(note_mutex);
  return probe_note;
}

}  // namespace kev
