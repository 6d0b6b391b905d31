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

std::string bf16_selection() {
  const char* env = std::getenv("KEV_BF16_CLASSES");
  return env && *env ? std::string(env) : bf16_default_spec();
}

std::string int8_selection(const ModelWeights& w) {
  if (w.quantized()) return "stored";
  const char* env = std::getenv("KEV_INT8_CLASSES");
  return env && *env ? std::string(env) : int8_default_spec(w.config().layers);
}

std::unique_ptr<Bf16DotWeights> prepare_bf16(const ModelWeights& w, const ModelKernels& k,
                                             size_t threads) {
  // bf16 reduces every projection but the GDN query and key rows (bf16_default_spec, model.h): one
  // range of rows per projection. With a dot kernel those rows are read from its own packed copy
  // and their mapped BF16 pages leave the resident set, as for int8 below (so bf16 holds one
  // copy). KEV_BF16_CLASSES replaces the selection (the grammar of KEV_INT8_CLASSES).
  auto d = std::make_unique<Bf16DotWeights>();
  d->packed = k.has_bf16_dot();
  const std::string selection = bf16_selection();
  const bool named = selection != bf16_default_spec();  // the default never gives two ranges
  const QuantSpecs specs = QuantSpecs::only(selection, "KEV_BF16_CLASSES");
  for (const ProjectionPlan& plan : quantization_plan(w.config(), specs)) {
    const Bf16Matrix& m = *w.projections().at(plan.name);
    for (const RowPart& r : plan.parts) {
      if (r.kind == WeightKind::kExact) continue;
      if (d->by_data.count(m.data))  // the GDN q and v rows reduced with k exact between them
        fail(named ? ErrorKind::kBadInput : ErrorKind::kInternal,
             "KEV_BF16_CLASSES: {} would run two separate row ranges in bf16; the bf16 mode "
             "reduces one range of rows per projection (reduce gdn_k with them, or leave gdn_q "
             "exact)",
             plan.name);
      Bf16Part part{r.row0, r.row1, {}};
      if (d->packed) {
        part.pairs = k.pack_bf16(rows_of(m, r.row0, r.row1), threads);
        w.release_pages(rows_of(m, r.row0, r.row1));
      }
      d->by_data.emplace(m.data, std::move(part));
    }
  }
  return d;
}

namespace {

// A quantized bundle's stored parts in the kernels' layouts; the mapped bytes of what was
// copied leave the resident set.
std::vector<ReducedPart> stored_parts(const ModelWeights& w, const Bf16Matrix& m,
                                      const std::vector<StoredPart>& stored, size_t threads) {
  std::vector<ReducedPart> parts;
  const int64_t blocks = (m.cols + kQuantBlock - 1) / kQuantBlock;
  for (const StoredPart& s : stored) {
    ReducedPart p;
    p.rows = s.rows;
    const int64_t n = s.rows.row1 - s.rows.row0;
    if (s.rows.kind == WeightKind::kExact) {
      p.exact = Bf16Matrix{reinterpret_cast<const uint16_t*>(s.q), n, m.cols};
      parts.push_back(std::move(p));
      continue;
    }
    if (s.rows.kind == WeightKind::kQ8)
      p.q8 = pack_q8_rows(s.q, s.scale, n, m.cols, threads);
    else if (s.rows.kind == WeightKind::kQ4z)
      p.q4 = pack_q4z_rows(s.q, s.scale, n, m.cols, threads);
    else if (s.rows.kind == WeightKind::kQ5z)
      p.q4 = pack_q5z_rows(s.q, s.scale, n, m.cols, threads);
    else if (s.rows.kind == WeightKind::kQ5)
      p.q4 = pack_q5_rows(s.q, s.scale, n, m.cols, threads);
    else
      p.q4 = pack_q4_rows(s.q, s.scale, n, m.cols, threads);
    const StoredLayout l = stored_layout(s.rows.kind, blocks);
    w.release_bytes(s.q, static_cast<size_t>(n * blocks * l.block_bytes));
    w.release_bytes(s.scale, static_cast<size_t>(n * l.scales * l.scale_bytes));
    parts.push_back(std::move(p));
  }
  return parts;
}

}  // namespace

std::unique_ptr<Int8Weights> prepare_int8(const ModelWeights& w, size_t threads) {
  auto q = std::make_unique<Int8Weights>();
  const char* env = std::getenv("KEV_INT8_CLASSES");
  if (w.quantized()) {
    if (env && *env)
      fail(ErrorKind::kBadInput,
           "KEV_INT8_CLASSES chooses what int8 quantizes at load; this bundle's projections are "
           "already stored quantized ({}), so it does not apply",
           w.stored_kinds());
    for (const auto& [name, stored] : w.stored()) {
      const Bf16Matrix& m = *w.projections().at(name);
      q->by_matrix.emplace(&m, stored_parts(w, m, stored, threads));
    }
    return q;
  }
  // Each quantized range's BF16 pages leave the resident set once copied, so int8 does not hold
  // both (the mapping stays valid: fp32/bf16 later fault them back in).
  const QuantSpecs specs = QuantSpecs::only(int8_selection(w), "KEV_INT8_CLASSES");
  for (const ProjectionPlan& plan : quantization_plan(w.config(), specs)) {
    if (!plan.reduced()) continue;
    const Bf16Matrix& m = *w.projections().at(plan.name);
    std::vector<ReducedPart> parts;
    for (const RowPart& r : plan.parts) {
      ReducedPart p;
      p.rows = r;
      const Bf16Matrix rows = rows_of(m, r.row0, r.row1);
      if (r.kind == WeightKind::kExact) {
        p.exact = rows;
      } else {
        p.q8 = quantize_int8(rows, threads);
        w.release_pages(rows);
      }
      parts.push_back(std::move(p));
    }
    q->by_matrix.emplace(&m, std::move(parts));
  }
  return q;
}

void project(const ModelKernels& kern, Precision precision, const Int8Weights* int8,
             const Bf16DotWeights* bf16, const float* x, int64_t rows, int64_t ldx,
             const Bf16Matrix& m, float* y, size_t threads, AlignedVector<float>& rounded) {
  if (runs_int8_weights(precision)) {
    const ActivationWidth width =
        precision == Precision::kW8A8 ? ActivationWidth::k8Bit : ActivationWidth::k16Bit;
    const std::vector<ReducedPart>* parts = int8->find(m);
    if (!parts) {
      if (!m.data) fail(ErrorKind::kInternal, "a stored projection has no prepared parts");
      kern.gemm(x, rows, ldx, m, y, m.rows, threads);
      return;
    }
    for (const ReducedPart& p : *parts) {
      float* out = y + p.rows.row0;
      if (p.rows.kind == WeightKind::kExact)
        kern.gemm(x, rows, ldx, p.exact, out, m.rows, threads);
      else if (p.rows.kind == WeightKind::kQ8)
        kern.gemm_int8(x, rows, ldx, p.q8, out, m.rows, threads, width);
      else
        kern.gemm_int4(x, rows, ldx, p.q4, out, m.rows, threads, width);
    }
    return;
  }
  if (!m.data)
    fail(ErrorKind::kInternal, "a stored projection reached the {} path",
         precision_name(precision));
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
                                          {Precision::kInt8, "int8", "int8"},
                                          {Precision::kW8A8, "w8a8", "int8"}};

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
  fail(ErrorKind::kBadInput, "unknown precision '{}' (expected fp32, bf16, int8 or w8a8)", name);
}

}  // namespace kev
