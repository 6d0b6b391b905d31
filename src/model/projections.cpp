#include "model/projections.h"

#include <cstdio>
#include <cstdlib>
#include <string>

#include "kev/core/bf16.h"
#include "kev/core/error.h"
#include "kev/core/threads.h"
#include "kev/cpu/gemm_int8.h"
#include "kev/cpu/model_kernels.h"

namespace kev {
namespace {

// Which projections kInt8 quantizes, by class and layer (model.h). The GDN input projection
// in_proj_qkv is three classes by rows (gdn_q, gdn_k, gdn_v); a matrix may be quantized in one
// contiguous range of its rows only.
enum class Int8Class {
  kAttnQ,
  kAttnK,
  kAttnV,
  kAttnO,
  kGdnQ,
  kGdnK,
  kGdnV,
  kGdnZ,
  kGdnOut,
  kMlpGate,
  kMlpUp,
  kMlpDown,
  kCount
};
constexpr int kInt8Classes = static_cast<int>(Int8Class::kCount);
constexpr const char* kInt8ClassNames[kInt8Classes] = {"attn_q",  "attn_k",   "attn_v", "attn_o",
                                                       "gdn_q",   "gdn_k",    "gdn_v",  "gdn_z",
                                                       "gdn_out", "mlp_gate", "mlp_up", "mlp_down"};

// Per class, the layers whose projection of that class is quantized.
struct Int8Selection {
  std::vector<bool> layers[kInt8Classes];
  bool quantized(int64_t layer, Int8Class c) const {
    const auto& l = layers[static_cast<int>(c)];
    return static_cast<size_t>(layer) < l.size() && l[static_cast<size_t>(layer)];
  }
};

// A spec is a comma list of `class[@first-last]` (layers 0-based, inclusive; default every
// layer); `all` stands for every class, `gdn_qkv` for gdn_q, gdn_k and gdn_v. KEV_INT8_CLASSES
// replaces the default spec (a diagnostic for parity studies, docs/performance.md; "none" quantizes
// nothing).
Int8Selection int8_selection(const std::string& spec, int64_t layers) {
  Int8Selection s;
  for (auto& l : s.layers) l.assign(static_cast<size_t>(layers), false);
  for (size_t begin = 0; begin <= spec.size();) {
    size_t end = spec.find(',', begin);
    if (end == std::string::npos) end = spec.size();
    const std::string entry = spec.substr(begin, end - begin);
    begin = end + 1;
    if (entry.empty() || entry == "none") continue;
    const size_t at = entry.find('@');
    const std::string name = entry.substr(0, at);
    long long first = 0, last = layers - 1;
    if (at != std::string::npos) {
      char tail = 0;
      if (std::sscanf(entry.c_str() + at + 1, "%lld-%lld%c", &first, &last, &tail) != 2 ||
          first < 0 || last < first || last >= layers)
        fail(ErrorKind::kBadInput,
             "KEV_INT8_CLASSES entry '{}': expected class@first-last within layers 0-{}", entry,
             layers - 1);
    }
    bool found = false;
    for (int c = 0; c < kInt8Classes; ++c) {
      const bool qkv = c >= static_cast<int>(Int8Class::kGdnQ) &&
                       c <= static_cast<int>(Int8Class::kGdnV) && name == "gdn_qkv";
      if (name != "all" && !qkv && name != kInt8ClassNames[c]) continue;
      found = true;
      for (long long l = first; l <= last; ++l) s.layers[c][static_cast<size_t>(l)] = true;
    }
    if (!found) fail(ErrorKind::kBadInput, "KEV_INT8_CLASSES: unknown projection class '{}'", name);
  }
  return s;
}

// The default (model.h, docs/performance.md "Precision modes"): every projection of the first
// quarter of the layers (rounded up) and the query and key rows of every GDN in_proj_qkv stay
// exact FP32; the rest is quantized. On the synthetic models, one class or one layer at a time,
// those were the sensitive ones: a layer's quantization error is relative to its own output,
// which early on is large against the residual stream and is then carried through every later
// layer; GDN queries and keys are L2-normalised per head, which turns a small head's absolute
// error into a large relative one.
std::string int8_default_spec(int64_t layers) {
  const int64_t first = (layers + 3) / 4;
  if (first >= layers) return "none";
  std::string spec;
  for (int c = 0; c < kInt8Classes; ++c) {
    if (c == static_cast<int>(Int8Class::kGdnQ) || c == static_cast<int>(Int8Class::kGdnK))
      continue;
    spec +=
        fmt::format("{}{}@{}-{}", spec.empty() ? "" : ",", kInt8ClassNames[c], first, layers - 1);
  }
  return spec;
}

// Calls fn(m, r0, r1) for every projection with rows [r0, r1) selected by `sel` (model.h lists
// the projections; a GDN in_proj_qkv is its query, key and value rows in that order).
template <typename Fn>
void for_each_selected(const ModelWeights& w, const Int8Selection& sel, Fn fn) {
  const ModelConfig& c = w.config();
  // parts: (class, row count) in row order; the selected ones must be contiguous.
  auto visit = [&](int64_t layer, const Bf16Matrix& m,
                   std::initializer_list<std::pair<Int8Class, int64_t>> parts) {
    int64_t r = 0, r0 = -1, r1 = -1;
    for (auto [cls, n] : parts) {
      if (sel.quantized(layer, cls)) {
        if (r0 < 0)
          r0 = r;
        else if (r1 != r)
          fail(ErrorKind::kBadInput,
               "KEV_INT8_CLASSES: layer {} quantizes rows of {} that "
               "are not contiguous",
               layer, kInt8ClassNames[static_cast<int>(cls)]);
        r1 = r + n;
      }
      r += n;
    }
    if (r0 >= 0) fn(m, r0, r1);
  };
  int64_t layer = 0;
  const int64_t qk = c.linear_key_heads * c.linear_key_dim;
  for (const LayerWeights& l : w.layers()) {
    if (l.full_attention) {
      visit(layer, l.attn.q, {{Int8Class::kAttnQ, l.attn.q.rows}});
      visit(layer, l.attn.k, {{Int8Class::kAttnK, l.attn.k.rows}});
      visit(layer, l.attn.v, {{Int8Class::kAttnV, l.attn.v.rows}});
      visit(layer, l.attn.o, {{Int8Class::kAttnO, l.attn.o.rows}});
    } else {
      visit(layer, l.gdn.qkv,
            {{Int8Class::kGdnQ, qk}, {Int8Class::kGdnK, qk}, {Int8Class::kGdnV, c.lin_v_total()}});
      visit(layer, l.gdn.z, {{Int8Class::kGdnZ, l.gdn.z.rows}});
      visit(layer, l.gdn.out, {{Int8Class::kGdnOut, l.gdn.out.rows}});
    }
    visit(layer, l.gate, {{Int8Class::kMlpGate, l.gate.rows}});
    visit(layer, l.up, {{Int8Class::kMlpUp, l.up.rows}});
    visit(layer, l.down, {{Int8Class::kMlpDown, l.down.rows}});
    ++layer;
  }
}

}  // namespace

std::unique_ptr<Bf16DotWeights> prepare_bf16(const ModelWeights& w, const ModelKernels& k,
                                             size_t threads) {
  // bf16 reduces the same projections as int8's default selection (model.h). With a dot kernel
  // those rows are read from its own packed copy and their mapped BF16 pages leave the resident
  // set, as for int8 below (so bf16 holds one copy).
  const int64_t layers = w.config().layers;
  auto d = std::make_unique<Bf16DotWeights>();
  d->packed = k.has_bf16_dot();
  for_each_selected(w, int8_selection(int8_default_spec(layers), layers),
                    [&](const Bf16Matrix& m, int64_t r0, int64_t r1) {
                      Bf16Part part{r0, r1, {}};
                      if (d->packed) {
                        part.pairs = k.pack_bf16(rows_of(m, r0, r1), threads);
                        w.release_pages(rows_of(m, r0, r1));
                      }
                      d->by_data.emplace(m.data, std::move(part));
                    });
  return d;
}

std::unique_ptr<Int8Weights> prepare_int8(const ModelWeights& w, size_t threads) {
  const int64_t layers = w.config().layers;
  auto q = std::make_unique<Int8Weights>();
  // Each quantized projection's BF16 pages leave the resident set once copied, so int8 does not
  // hold both (the mapping stays valid: fp32/bf16 later fault them back in).
  const char* env = std::getenv("KEV_INT8_CLASSES");
  for_each_selected(
      w, int8_selection(env && *env ? std::string(env) : int8_default_spec(layers), layers),
      [&](const Bf16Matrix& m, int64_t r0, int64_t r1) {
        q->by_data.emplace(m.data, Int8Part{r0, quantize_int8(rows_of(m, r0, r1), threads)});
        w.release_pages(rows_of(m, r0, r1));
      });
  return q;
}

void project(const ModelKernels& kern, Precision precision, const Int8Weights* int8,
             const Bf16DotWeights* bf16, const float* x, int64_t rows, int64_t ldx,
             const Bf16Matrix& m, float* y, size_t threads, AlignedVector<float>& rounded) {
  if (precision == Precision::kInt8) {
    const Int8Part* p = int8->find(m);
    if (!p) {
      kern.gemm(x, rows, ldx, m, y, m.rows, threads);
      return;
    }
    const int64_t r0 = p->row0, r1 = r0 + p->q.rows;
    kern.gemm_int8(x, rows, ldx, p->q, y + r0, m.rows, threads);
    // Rows outside the quantized part: exact FP32 on the same rows of the BF16 matrix.
    if (r0 > 0) kern.gemm(x, rows, ldx, rows_of(m, 0, r0), y, m.rows, threads);
    if (r1 < m.rows) kern.gemm(x, rows, ldx, rows_of(m, r1, m.rows), y + r1, m.rows, threads);
    return;
  }
  if (precision == Precision::kBf16) {
    const Bf16Part* p = bf16->find(m);
    if (!p) {
      kern.gemm(x, rows, ldx, m, y, m.rows, threads);
      return;
    }
    const int64_t r0 = p->row0, r1 = p->row1;
    if (bf16->packed) {
      kern.gemm_bf16_dot(x, rows, ldx, p->pairs, y + r0, m.rows, threads);
    } else {
      const int64_t cols = m.cols;
      rounded.resize(static_cast<size_t>(rows * cols));
      float* r = rounded.data();
      parallel_for(
          static_cast<size_t>(rows),
          [&](size_t row) {
            const float* src = x + static_cast<int64_t>(row) * ldx;
            float* dst = r + static_cast<int64_t>(row) * cols;
            for (int64_t i = 0; i < cols; ++i) dst[i] = bf16_to_f32(f32_to_bf16(src[i]));
          },
          threads);
      kern.gemm(r, rows, cols, rows_of(m, r0, r1), y + r0, m.rows, threads);
    }
    // Rows outside the selected part: exact FP32, as for int8.
    if (r0 > 0) kern.gemm(x, rows, ldx, rows_of(m, 0, r0), y, m.rows, threads);
    if (r1 < m.rows) kern.gemm(x, rows, ldx, rows_of(m, r1, m.rows), y + r1, m.rows, threads);
    return;
  }
  kern.gemm(x, rows, ldx, m, y, m.rows, threads);
}

namespace {

struct PrecisionNames {
  Precision precision;
  const char* name;
  const char* torch_dtype;
};
constexpr PrecisionNames kPrecisions[] = {{Precision::kFp32, "fp32", "float32"},
                                          {Precision::kBf16, "bf16", "bfloat16"},
                                          {Precision::kInt8, "int8", "int8"}};

const PrecisionNames& names_of(Precision p) {
  for (const PrecisionNames& n : kPrecisions)
    if (n.precision == p) return n;
  return kPrecisions[0];
}

}  // namespace

const char* precision_name(Precision p) {
  return names_of(p).name;
}

const char* torch_dtype_name(Precision p) {
  return names_of(p).torch_dtype;
}

Precision parse_precision(const std::string& name) {
  for (const PrecisionNames& n : kPrecisions)
    if (name == n.name) return n.precision;
  fail(ErrorKind::kBadInput, "unknown precision '{}' (expected fp32, bf16 or int8)", name);
}

}  // namespace kev
