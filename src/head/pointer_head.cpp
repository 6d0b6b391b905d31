#include "kev/head/pointer_head.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstring>

#include "kev/core/error.h"
#include "kev/core/file.h"
#include "kev/core/fixed_math.h"
#include "kev/core/sha256.h"
#include "kev/core/threads.h"
#include "kev/cpu/head_kernels.h"
#include "kev/formats/bundle_manifest.h"
#include "kev/formats/safetensors.h"

namespace kev {

namespace {

constexpr const char* kTensorNames[4] = {"q.weight", "q.bias", "k.weight", "k.bias"};

// Index of the first non-finite value, or n.
size_t first_non_finite(const float* x, size_t n) {
  // Branch-free scan (vectorises); the slow search only runs when something is wrong.
  uint32_t bad = 0;
  for (size_t i = 0; i < n; ++i) {
    uint32_t u;
    std::memcpy(&u, x + i, 4);
    bad |= static_cast<uint32_t>((u & 0x7f800000u) == 0x7f800000u);
  }
  if (!bad) return n;
  for (size_t i = 0; i < n; ++i)
    if (!std::isfinite(x[i])) return i;
  return n;
}

void check_tensor_finite(const std::vector<float>& t, const char* name, const std::string& source) {
  size_t i = first_non_finite(t.data(), t.size());
  if (i != t.size())
    fail(ErrorKind::kBadInput, "{}: tensor {} holds a non-finite value ({}) at element {}", source,
         name, t[i], i);
}

}  // namespace

void check_temperature(double t, const std::string& where) {
  if (!std::isfinite(t) || !(t > 0))
    fail(ErrorKind::kBadInput, "{}: the temperature must be a finite number > 0, got {}", where, t);
}

PointerHead::PointerHead(PointerHeadWeights weights, double temperature)
    : w_(std::move(weights)), temperature_(temperature) {
  const std::string source = "pointer head";
  size_t p = w_.pointer_dim, d = w_.hidden;
  if (p == 0 || d == 0)
    fail(ErrorKind::kBadInput, "{}: dimensions must be positive (pointer {}, hidden {})", source, p,
         d);
  const std::vector<float>* tensors[4] = {&w_.q_weight, &w_.q_bias, &w_.k_weight, &w_.k_bias};
  const size_t expected[4] = {p * d, p, p * d, p};
  for (int i = 0; i < 4; ++i) {
    if (tensors[i]->size() != expected[i])
      fail(ErrorKind::kBadInput, "{}: tensor {} has {} values, expected {}", source,
           kTensorNames[i], tensors[i]->size(), expected[i]);
    check_tensor_finite(*tensors[i], kTensorNames[i], source);
  }
  check_temperature(temperature, source);
  // The reference multiplies by the Python float 1/sqrt(p), which torch applies in FP32.
  scale_ = static_cast<float>(1.0 / std::sqrt(static_cast<double>(p)));
}

void PointerHead::set_temperature(double temperature) {
  check_temperature(temperature, "the temperature override");
  temperature_ = temperature;
}

PointerHead PointerHead::from_safetensors(const std::string& path, double temperature) {
  check_temperature(temperature, path);
  SafetensorsFile file(path);
  for (const TensorInfo& t : file.tensors()) {
    bool known = false;
    for (const char* name : kTensorNames) known = known || t.name == name;
    if (!known)
      fail(ErrorKind::kBadInput,
           "{}: unexpected tensor {} (a pointer head holds exactly q.weight, q.bias, k.weight, "
           "k.bias)",
           path, t.name);
  }
  const TensorInfo* infos[4];
  for (int i = 0; i < 4; ++i) {
    infos[i] = file.find(kTensorNames[i]);
    if (!infos[i]) fail(ErrorKind::kBadInput, "{}: tensor {} is missing", path, kTensorNames[i]);
    if (infos[i]->dtype != DType::kF32)
      fail(ErrorKind::kBadInput, "{}: tensor {} is {}, expected F32", path, kTensorNames[i],
           dtype_name(infos[i]->dtype));
  }
  const auto& qw = infos[0]->shape;
  if (qw.size() != 2 || qw[0] <= 0 || qw[1] <= 0)
    fail(ErrorKind::kBadInput, "{}: tensor q.weight has shape {}, expected [p, d] with p, d > 0",
         path, shape_string(qw));
  const std::vector<int64_t> matrix = qw, vector = {qw[0]};
  const std::vector<int64_t>* shapes[4] = {&matrix, &vector, &matrix, &vector};
  for (int i = 1; i < 4; ++i)
    if (infos[i]->shape != *shapes[i])
      fail(ErrorKind::kBadInput, "{}: tensor {} has shape {}, expected {}", path, kTensorNames[i],
           shape_string(infos[i]->shape), shape_string(*shapes[i]));

  PointerHeadWeights w;
  w.pointer_dim = static_cast<size_t>(qw[0]);
  w.hidden = static_cast<size_t>(qw[1]);
  std::vector<float>* dst[4] = {&w.q_weight, &w.q_bias, &w.k_weight, &w.k_bias};
  for (int i = 0; i < 4; ++i) {
    dst[i]->resize(static_cast<size_t>(infos[i]->numel()));
    std::memcpy(dst[i]->data(), file.data(*infos[i]), infos[i]->nbytes);
    check_tensor_finite(*dst[i], kTensorNames[i], path);
  }
  return PointerHead(std::move(w), temperature);
}

PointerHead PointerHead::load_bundle(const std::string& dir) {
  return load_bundle(dir, read_bundle_manifest(dir));
}

PointerHead PointerHead::load_bundle(const std::string& dir, const BundleManifest& manifest) {
  const std::string head_path = dir + "/head.safetensors";
  const std::optional<double> t = manifest.temperature();
  if (!t) fail(ErrorKind::kBadInput, "{}: \"temperature\" is missing", manifest.path);
  check_temperature(*t, manifest.path + " \"temperature\"");
  if (auto recorded = manifest.output_sha256("head.safetensors")) {
    std::string actual = sha256_file(head_path);
    if (actual != *recorded)
      fail(ErrorKind::kIntegrity,
           "{} has SHA-256 {} but {} records {}; the bundle is damaged (re-export it)", head_path,
           actual, manifest.path, *recorded);
  }
  PointerHead head = from_safetensors(head_path, *t);
  const std::pair<const char*, size_t> checks[2] = {{"hidden", head.hidden()},
                                                    {"pointer", head.pointer_dim()}};
  for (const auto& [key, actual] : checks) {
    std::optional<uint64_t> recorded = manifest.dimension(key);
    if (recorded && *recorded != actual)
      fail(ErrorKind::kBadInput, "{}: dimensions.{} is {} but {} has {}", manifest.path, key,
           *recorded, head_path, actual);
  }
  return head;
}

size_t PointerHead::slot_floats() const {
  // u[kMaxBlock][p] then v[kMaxBlock][d], each row padded to 16 floats (64 bytes).
  auto pad = [](size_t n) { return (n + 15) / 16 * 16; };
  return head_kernels::kMaxBlock * (pad(w_.pointer_dim) + pad(w_.hidden));
}

void PointerHead::check_question(const HeadQuestion& q, size_t index) const {
  size_t d = w_.hidden;
  if (q.num_options == 0)
    fail(ErrorKind::kBadInput, "question {} has no options (1 to {} are allowed)", index,
         kMaxOptions);
  if (q.num_options > kMaxOptions)
    fail(ErrorKind::kBadInput, "question {} has {} options, more than the {} allowed", index,
         q.num_options, kMaxOptions);
  if (q.decide.size() != d)
    fail(ErrorKind::kBadInput,
         "question {}: the decide hidden state has {} values but the head's hidden size is {}",
         index, q.decide.size(), d);
  if (q.options.size() != q.num_options * d)
    fail(ErrorKind::kBadInput,
         "question {}: {} option values given for {} options of hidden size {} (expected {})",
         index, q.options.size(), q.num_options, d, q.num_options * d);
  size_t i = first_non_finite(q.decide.data(), d);
  if (i != d)
    fail(ErrorKind::kBadInput, "question {}: the decide hidden state holds {} at feature {}", index,
         q.decide[i], i);
  // Options are checked after projection: a NaN or Inf anywhere in option i always makes
  // logit i non-finite (NaN and Inf propagate through every FMA and add, and Inf * 0 is NaN),
  // so scanning K logits replaces scanning K*d inputs; explain_non_finite() then names the
  // culprit.
}

void PointerHead::explain_non_finite(const HeadQuestion& q, size_t index, size_t option,
                                     float value) const {
  size_t d = w_.hidden;
  size_t i = first_non_finite(q.options.data(), q.options.size());
  if (i != q.options.size())
    fail(ErrorKind::kBadInput, "question {}: option {} holds {} at feature {}", index, i / d,
         q.options[i], i % d);
  fail(ErrorKind::kBadInput,
       "question {}: the logit of option {} overflowed to {} (hidden states too large)", index,
       option, value);
}

void PointerHead::project_block(const HeadQuestion* qs, size_t count, float* const* outs,
                                float* scratch, Isa isa) const {
  const auto& k = head_kernels::kernels(isa);
  size_t p = w_.pointer_dim, d = w_.hidden;
  size_t pp = (p + 15) / 16 * 16, dp = (d + 15) / 16 * 16;
  const float* h[head_kernels::kMaxBlock];
  float* u[head_kernels::kMaxBlock];
  float* v[head_kernels::kMaxBlock];
  for (size_t q = 0; q < count; ++q) {
    h[q] = qs[q].decide.data();
    u[q] = scratch + q * pp;
    v[q] = scratch + head_kernels::kMaxBlock * pp + q * dp;
  }
  k.project(w_.q_weight.data(), w_.q_bias.data(), p, d, h, count, u);
  k.fold(w_.k_weight.data(), p, d, d, u, count, v);
  for (size_t q = 0; q < count; ++q) {
    float c = k.dot(w_.k_bias.data(), u[q], p);
    k.logits(qs[q].options.data(), qs[q].num_options, d, v[q], c, scale_, outs[q]);
  }
}

void PointerHead::project(const HeadQuestion& q, std::span<float> logits, HeadWorkspace& ws,
                          Isa isa) const {
  project_batch(std::span<const HeadQuestion>(&q, 1), logits, ws, isa, 1);
}

void PointerHead::project_batch(std::span<const HeadQuestion> qs, std::span<float> logits,
                                HeadWorkspace& ws, Isa isa, size_t workers) const {
  size_t total = 0;
  for (size_t i = 0; i < qs.size(); ++i) {
    check_question(qs[i], i);
    total += qs[i].num_options;
  }
  if (logits.size() != total)
    fail(ErrorKind::kBadInput, "the logits buffer holds {} values for {} options", logits.size(),
         total);
  head_kernels::kernels(isa);  // refuse an unsupported variant before any work
  if (qs.empty()) return;

  // Even blocks of at most kMaxBlock consecutive questions; one block per task.
  size_t n = qs.size();
  size_t blocks = (n + head_kernels::kMaxBlock - 1) / head_kernels::kMaxBlock;
  size_t per_block = (n + blocks - 1) / blocks;
  blocks = (n + per_block - 1) / per_block;
  if (workers == 0) workers = default_workers();
  if (workers > blocks) workers = blocks;

  size_t slot = slot_floats();
  ws.reserve(workers * slot);
  ws.offsets_.resize(std::max(ws.offsets_.size(), n));  // grows once, then reused
  size_t offset = 0;
  for (size_t i = 0; i < n; ++i) {
    ws.offsets_[i] = offset;
    offset += qs[i].num_options;
  }
  auto run_block = [&](size_t b, float* scratch) {
    size_t first = b * per_block, count = std::min(per_block, n - first);
    float* outs[head_kernels::kMaxBlock];
    for (size_t q = 0; q < count; ++q) outs[q] = logits.data() + ws.offsets_[first + q];
    project_block(qs.data() + first, count, outs, scratch, isa);
  };
  if (workers <= 1) {
    for (size_t b = 0; b < blocks; ++b) run_block(b, ws.slot(0, slot));
  } else {
    std::atomic<size_t> next{0};
    parallel_for(
        workers,
        [&](size_t w) {
          for (size_t b = next++; b < blocks; b = next++) run_block(b, ws.slot(w, slot));
        },
        workers);
  }
  size_t bad = first_non_finite(logits.data(), total);
  if (bad != total) {
    size_t q = 0;
    while (ws.offsets_[q] + qs[q].num_options <= bad) ++q;
    explain_non_finite(qs[q], q, bad - ws.offsets_[q], logits[bad]);
  }
}

void calibrate_logits(std::span<const float> logits, double temperature, std::span<float> probs) {
  size_t n = logits.size();
  if (n == 0 || n > kMaxOptions)
    fail(ErrorKind::kBadInput, "calibration needs 1 to {} logits, got {}", kMaxOptions, n);
  if (probs.size() != n)
    fail(ErrorKind::kBadInput, "the probabilities buffer holds {} values for {} logits",
         probs.size(), n);
  check_temperature(temperature, "calibration");
  if (size_t i = first_non_finite(logits.data(), n); i != n)
    fail(ErrorKind::kBadInput, "calibration: logit {} is not finite ({})", i, logits[i]);
  const float t = static_cast<float>(temperature);
  double z[kMaxOptions];
  double max = -INFINITY;
  for (size_t i = 0; i < n; ++i) {
    z[i] = static_cast<double>(logits[i] / t);  // FP32 division, as torch's z / T
    max = std::max(max, z[i]);
  }
  double sum = 0;
  for (size_t i = 0; i < n; ++i) {
    z[i] = fixed_exp(z[i] - max);  // fixed_math.h: the same bits on every architecture
    sum += z[i];
  }
  for (size_t i = 0; i < n; ++i) probs[i] = static_cast<float>(z[i] / sum);
}

void PointerHead::calibrate(std::span<const float> logits, std::span<float> probs) const {
  calibrate_logits(logits, temperature_, probs);
}

void PointerHead::calibrate_batch(std::span<const size_t> counts, std::span<const float> logits,
                                  std::span<float> probs) const {
  size_t total = 0;
  for (size_t c : counts) total += c;
  if (logits.size() != total || probs.size() != total)
    fail(ErrorKind::kBadInput, "calibration: {} logits and {} probabilities for {} options",
         logits.size(), probs.size(), total);
  size_t offset = 0;
  for (size_t c : counts) {
    calibrate(logits.subspan(offset, c), probs.subspan(offset, c));
    offset += c;
  }
}

void PointerHead::score_batch(std::span<const HeadQuestion> qs, std::span<float> logits,
                              std::span<float> probs, HeadWorkspace& ws) const {
  project_batch(qs, logits, ws);
  if (probs.size() != logits.size())
    fail(ErrorKind::kBadInput, "the probabilities buffer holds {} values for {} options",
         probs.size(), logits.size());
  size_t offset = 0;
  for (const HeadQuestion& q : qs) {
    calibrate(std::span<const float>(logits).subspan(offset, q.num_options),
              probs.subspan(offset, q.num_options));
    offset += q.num_options;
  }
}

}  // namespace kev
