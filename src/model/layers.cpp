// The Runner: one pass of a batch of segments through the embedding, every decoder layer and
// the final norm (layers.h). Each layer is pre-norm: x += mixer(RMSNorm(x)) (attention.h or
// gdn.h by the layer's type), then x += MLP(RMSNorm(x)) (mlp.h); the units share the pass
// (layer_pass.h), which owns the workspace.
#include "model/layers.h"

#include <algorithm>
#include <cstring>
#include <memory>

#include "kev/core/bf16.h"
#include "kev/core/fixed_math.h"
#include "model/attention.h"
#include "model/cpu_state.h"
#include "model/gdn.h"
#include "model/layer_pass.h"
#include "model/mlp.h"

namespace kev {
namespace {

class Runner {
 public:
  Runner(const ModelWeights& w, const ForwardOptions& o, const ModelKernels& kernels,
         const Int8Weights* int8, const Bf16DotWeights* bf16)
      : pass_(w, o, kernels, int8, bf16), c_(pass_.c) {}

  void run(std::vector<Segment>& segs, std::vector<float>& out, PrefixState* state_out) {
    int64_t total = 0;
    for (auto& s : segs) {
      s.offset = total;
      total += s.len;
    }
    pass_.rows = total;
    pass_.ws.allocate(c_, total);
    embed(segs);
    rope_tables(segs);
    const bool trim = plan_reads(segs);
    std::shared_ptr<CpuState> extended;
    if (state_out) extended = std::make_shared<CpuState>(sz(c_.layers));
    for (int64_t l = 0; l < c_.layers; ++l) {
      LayerState* st = extended ? &extended->layers[sz(l)] : nullptr;
      if (!run_layer(l, segs, st, trim && l == c_.layers - 1)) break;
    }
    if (state_out)
      *state_out = PrefixState{segs[0].from->length + segs[0].len, std::move(extended)};
    out.resize(sz(pass_.rows * c_.hidden));
    rmsnorm_rows(pass_.k, pass_.ws.x.data(), out.data(), pass_.rows, c_.hidden,
                 pass_.w.final_norm().data(), true, pass_.eps(), pass_.threads);
  }

 private:
  // Layer l over the batch. last_trimmed (the last layer, some rows unread): after the mixer only
  // the read rows go on, moved to the front. False when no row is left to run.
  bool run_layer(int64_t l, const std::vector<Segment>& segs, LayerState* st, bool last_trimmed) {
    const LayerWeights& lw = pass_.w.layers()[sz(l)];
    Workspace& ws = pass_.ws;
    const int64_t h = c_.hidden;
    rmsnorm_rows(pass_.k, ws.x.data(), ws.xn.data(), pass_.rows, h, lw.input_norm.data(), true,
                 pass_.eps(), pass_.threads);
    if (lw.full_attention) {
      run_attention(pass_, lw.attn, l, segs, st, last_trimmed);
    } else {
      run_gdn(pass_, lw.gdn, l, segs, st);
      if (last_trimmed) pass_.keep_read_rows(ws.mix.data(), h);
    }
    if (last_trimmed) {
      pass_.keep_read_rows(ws.x.data(), h);
      pass_.rows = static_cast<int64_t>(pass_.read_rows.size());
      if (pass_.rows == 0) return false;
    }
    add_into_x();
    rmsnorm_rows(pass_.k, ws.x.data(), ws.xn.data(), pass_.rows, h, lw.post_norm.data(), true,
                 pass_.eps(), pass_.threads);
    run_mlp(pass_, lw);
    add_into_x();
    return true;
  }

  // Sets each segment's out_offset and, when some rows are not read, the batch rows that are
  // (pass_.read_rows, ascending; read_mask per row). True when the last layer can skip rows.
  bool plan_reads(std::vector<Segment>& segs) {
    pass_.read_rows.clear();
    pass_.read_mask.assign(sz(pass_.rows), 0);
    bool all = true;
    for (const Segment& s : segs) all = all && s.read_all;
    int64_t at = 0;
    for (Segment& s : segs) {
      s.out_offset = all ? s.offset : at;
      if (all) continue;
      for (int64_t i = 0; i < s.len; ++i) {
        if (!s.read_all && !std::binary_search(s.read.begin(), s.read.end(), i)) continue;
        pass_.read_rows.push_back(s.offset + i);
        pass_.read_mask[sz(s.offset + i)] = 1;
        ++at;
      }
    }
    return !all;
  }

  void embed(const std::vector<Segment>& segs) {
    const int64_t h = c_.hidden;
    for (const auto& s : segs)
      for (int64_t i = 0; i < s.len; ++i) {
        const uint16_t* src = pass_.w.embed().data + static_cast<int64_t>(s.ids[i]) * h;
        float* dst = pass_.ws.x.data() + (s.offset + i) * h;
        for (int64_t d = 0; d < h; ++d) {
          uint16_t b;
          std::memcpy(&b, src + d, 2);
          dst[d] = bf16_to_f32(b);
        }
      }
  }

  // inv_freq = theta^(-2i/rot); angles computed in double, then rounded (upstream multiplies in
  // FP32; the difference is below one FP32 ulp of the angle times the position). Positions,
  // explicit or implicit, are <= kMaxPosition = kFixedTrigMaxArg (model.cpp checks) and
  // rope_theta > 1 (config.cpp checks), so every inv_freq <= 1 and every angle lies within
  // fixed_sin / fixed_cos's exact range: the same bits on every architecture.
  void rope_tables(const std::vector<Segment>& segs) {
    static_assert(kMaxPosition <= kFixedTrigMaxArg);
    const int64_t half = c_.rotary_dim / 2;
    std::vector<double> inv_freq(sz(half));
    for (int64_t f = 0; f < half; ++f)
      inv_freq[sz(f)] = fixed_pow(
          c_.rope_theta, -2.0 * static_cast<double>(f) / static_cast<double>(c_.rotary_dim));
    for (const auto& s : segs)
      for (int64_t i = 0; i < s.len; ++i)
        for (int64_t f = 0; f < half; ++f) {
          const double angle = static_cast<double>(s.positions[sz(i)]) * inv_freq[sz(f)];
          pass_.ws.cos[sz((s.offset + i) * half + f)] = static_cast<float>(fixed_cos(angle));
          pass_.ws.sin[sz((s.offset + i) * half + f)] = static_cast<float>(fixed_sin(angle));
        }
  }

  void add_into_x() {
    const int64_t n = pass_.rows * c_.hidden;
    float* x = pass_.ws.x.data();
    const float* mix = pass_.ws.mix.data();
    for (int64_t i = 0; i < n; ++i) x[i] += mix[i];
  }

  LayerPass pass_;
  const ModelConfig& c_;
};

}  // namespace

void run_layers(const ModelWeights& w, const ForwardOptions& options, const ModelKernels& kernels,
                const Int8Weights* int8, const Bf16DotWeights* bf16, std::vector<Segment>& segs,
                std::vector<float>& out, PrefixState* state_out) {
  Runner(w, options, kernels, int8, bf16).run(segs, out, state_out);
}

}  // namespace kev
