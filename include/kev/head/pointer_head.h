// The FP32 pointer head and its calibration (docs/reference.md section 5).
//
// Contract. For one question with decide state h_d and option states h_1..h_K (K = 1..255,
// each a d-float vector), the head returns K raw logits in the caller's option order:
//     logit_i = dot(W_k h_i + b_k, W_q h_d + b_q) / sqrt(p)
// and calibration returns softmax(logit / T) over that question's options only (never across
// questions). Projection and calibration are separate calls; score() does both.
//
// Order of operations (FP32, fixed, identical on every ISA, every batch size and thread count):
//   u   = W_q h_d + b_q               u_k = dot16(W_q[k,:], h_d) + b_q[k]
//   v   = W_k^T u                     v_j = sum_{k=0..p-1} u_k * W_k[k,j]   (FMA, k ascending)
//   c   = dot16(b_k, u)
//   logit_i = (dot16(h_i, v) + c) * (1/sqrt(p))
// dot16(a, b) keeps 16 FMA partial sums (lane l takes elements l, l+16, ..., the tail zero-
// padded) and adds them as a fixed tree: s8[i]=a[i]+a[i+8], s4[i]=s8[i]+s8[i+4],
// s2[i]=s4[i]+s4[i+2], s=s2[0]+s2[1]. Folding W_k into v is the same bilinear form as the
// reference's "k(h_i) @ q(h_d)" (dot(W_k h + b_k, u) = dot(h, W_k^T u) + dot(b_k, u)) but costs
// d FMAs per option instead of p*d; W_q h_d and W_k^T u are computed once per question.
// Calibration: z_i = logit_i / float(T) in FP32 (as torch does), then softmax in FP64 (max
// subtracted) rounded once to FP32.
//
// Threads and memory: a batch is cut into blocks of up to 8 consecutive questions (their W_q /
// W_k loads are shared); blocks run on kev::parallel_for workers (which start threads per
// call), a lone block on the calling thread (splitting one block over two threads was measured
// slower on the shared 2-core machine: docs/performance.md). Results do not depend on the split.
// The kernels allocate nothing; scratch lives in the caller's HeadWorkspace, which grows on first
// use and is reused afterwards.
//
// Refusals (kev::Error kBadInput, one sentence naming the question / option / tensor): 0 or
// more than 255 options, a hidden size other than d, NaN/Inf inputs, a temperature that is not
// finite and > 0, a non-finite result (overflow of finite inputs).
#pragma once
#include <cstddef>
#include <span>
#include <string>
#include <vector>

#include "kev/cpu/head_kernels.h"  // head_isa(): the variant used by default
#include "kev/cpu/isa.h"
#include "kev/formats/bundle_manifest.h"
#include "kev/text/question_limits.h"  // kMaxOptions

namespace kev {

// One question: views into caller memory (row-major, options contiguous).
struct HeadQuestion {
  std::span<const float> decide;   // [d]
  std::span<const float> options;  // [num_options * d]
  size_t num_options = 0;
};

// Reusable scratch for projections. Not shared between concurrent calls.
class HeadWorkspace {
 public:
  float* slot(size_t index, size_t slot_floats) { return buffer_.data() + index * slot_floats; }
  void reserve(size_t floats) {
    if (buffer_.size() < floats) buffer_.resize(floats);
  }

 private:
  friend class PointerHead;
  std::vector<float> buffer_;
  std::vector<size_t> offsets_;  // per-question start in the concatenated outputs
};

struct PointerHeadWeights {
  size_t pointer_dim = 0;                                 // p
  size_t hidden = 0;                                      // d
  std::vector<float> q_weight, q_bias, k_weight, k_bias;  // [p,d], [p], [p,d], [p]
};

class PointerHead {
 public:
  // Validates shapes, finiteness (naming the tensor) and the temperature.
  PointerHead(PointerHeadWeights weights, double temperature);

  // head.safetensors (exactly q.weight, q.bias, k.weight, k.bias, F32) + temperature.
  static PointerHead from_safetensors(const std::string& path, double temperature);
  // An export bundle: <dir>/head.safetensors and "temperature" from <dir>/kev_export.json
  // (its "dimensions" and "outputs"["head.safetensors"] hash are checked when present). A
  // manifest that says anything this kev does not implement is refused first (Error
  // kUnsupported, check_bundle_supported in formats/checkpoint_fields.h): kev score, kev serve
  // and kev head never run a bundle from a newer kev.
  static PointerHead load_bundle(const std::string& dir);
  // The same against a manifest the caller has read already (score/bundle.h).
  static PointerHead load_bundle(const std::string& dir, const BundleManifest& manifest);

  size_t hidden() const { return w_.hidden; }
  size_t pointer_dim() const { return w_.pointer_dim; }
  double temperature() const { return temperature_; }
  // Replaces the calibration temperature (KEV_TEMPERATURE / --temperature); refused unless
  // finite and > 0. Projections are unaffected.
  void set_temperature(double temperature);

  // Raw logits of one question, on the calling thread; logits.size() must equal q.num_options.
  void project(const HeadQuestion& q, std::span<float> logits, HeadWorkspace& ws,
               Isa isa = head_isa()) const;
  // Raw logits of many questions, concatenated in question order into `logits` (size = total
  // options). Bit-identical to calling project() once per question.
  void project_batch(std::span<const HeadQuestion> qs, std::span<float> logits, HeadWorkspace& ws,
                     Isa isa = head_isa(), size_t workers = 0) const;
  // softmax(logits / temperature()) of one question.
  void calibrate(std::span<const float> logits, std::span<float> probs) const;
  // Per-question calibration of concatenated logits (counts[i] options for question i).
  void calibrate_batch(std::span<const size_t> counts, std::span<const float> logits,
                       std::span<float> probs) const;
  // project_batch + calibrate_batch.
  void score_batch(std::span<const HeadQuestion> qs, std::span<float> logits,
                   std::span<float> probs, HeadWorkspace& ws) const;

 private:
  void check_question(const HeadQuestion& q, size_t index) const;
  [[noreturn]] void explain_non_finite(const HeadQuestion& q, size_t index, size_t option,
                                       float value) const;
  void project_block(const HeadQuestion* qs, size_t count, float* const* outs, float* scratch,
                     Isa isa) const;
  size_t slot_floats() const;

  PointerHeadWeights w_;
  double temperature_;
  float scale_;  // float(1 / sqrt(p)), as the reference multiplies by it
};

// softmax(logits / temperature) over one question's options (see the order above). Refuses
// 0 or > 255 logits, non-finite logits and a temperature that is not finite and > 0.
void calibrate_logits(std::span<const float> logits, double temperature, std::span<float> probs);

// Throws unless t is finite and > 0; `where` names the source in the message.
void check_temperature(double t, const std::string& where);

}  // namespace kev
