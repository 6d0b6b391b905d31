// The Runner: one pass of a batch of segments through the embedding, every decoder layer and
// the final norm (layers.h). Each layer is pre-norm: x += mixer(RMSNorm(x)) (attention.h or
// gdn.h by the layer's type), then x += MLP(RMSNorm(x)) (mlp.h); the units share the pass
// (layer_pass.h), which owns the workspace.
#include "model/layers.h"

#include <algorithm>
#include <cstring>
#include <memory>

#include "kev/core/bf16.h"
#include "kev/core/error.h"
#include "kev/core/fixed_math.h"
#include "model/attention.h"
#include "model/cpu_state.h"
#include "model/gdn.h"
#include "model/layer_pass.h"
#include "model/mlp.h"

namespace kev {
namespace {

// The states a pass builds: one for each segment that keeps its state or that a later segment
// continues. A continuing segment reads its predecessor's state through a link (a PrefixState
// over the state being built, layer by layer, its `from` while the pass runs), and runs its
// mixing in a later wave (LayerPass::waves).
class Chains {
 public:
  Chains(const ModelConfig& c, std::vector<Segment>& segs, LayerPass& pass)
      : segs_(segs), built_(segs.size()), links_(segs.size()), from_(segs.size()) {
    for (size_t i = 0; i < segs.size(); ++i) {
      from_[i] = segs[i].from;
      if (segs[i].continues >= static_cast<int64_t>(i))
        fail(ErrorKind::kInternal, "segment {} continues segment {}, not an earlier one", i,
             segs[i].continues);
    }
    std::vector<size_t> depth(segs.size(), 0);
    for (size_t i = 0; i < segs.size(); ++i) {
      Segment& s = segs[i];
      if (s.keep_state) built_[i] = std::make_shared<CpuState>(sz(c.layers));
      if (s.continues < 0) continue;
      const auto p = sz(s.continues);
      if (!built_[p]) built_[p] = std::make_shared<CpuState>(sz(c.layers));
      const int64_t start = segs[p].continues >= 0 ? links_[p].length : segs[p].from->length;
      links_[i] = PrefixState{start + segs[p].len, built_[p]};
      depth[i] = depth[p] + 1;
    }
    for (size_t i = 0; i < segs.size(); ++i) {
      if (depth[i] >= pass.waves.size()) pass.waves.resize(depth[i] + 1);
      pass.waves[depth[i]].push_back(i);
    }
    pass.building.assign(segs.size(), nullptr);
    for (size_t i = 0; i < segs.size(); ++i)  // last: nothing after this throws
      if (segs[i].continues >= 0) segs[i].from = &links_[i];
  }

  // Points the pass at layer l's part of each state being built.
  void select_layer(int64_t l, LayerPass& pass) const {
    for (size_t i = 0; i < built_.size(); ++i)
      pass.building[i] = built_[i] ? &built_[i]->layers[sz(l)] : nullptr;
  }

  // The kept states, in segment order.
  void finish(std::vector<PrefixState>* states) const {
    if (!states) return;
    for (size_t i = 0; i < segs_.size(); ++i)
      if (segs_[i].keep_state)
        states->push_back(PrefixState{segs_[i].from->length + segs_[i].len, built_[i]});
  }
  // The segments get their own `from` back, however the pass ended.
  ~Chains() {
    for (size_t i = 0; i < segs_.size(); ++i) segs_[i].from = from_[i];
  }
  Chains(const Chains&) = delete;
  Chains& operator=(const Chains&) = delete;

 private:
  std::vector<Segment>& segs_;
  std::vector<std::shared_ptr<CpuState>> built_;
  std::vector<PrefixState> links_;
  std::vector<const PrefixState*> from_;
};

class Runner {
 public:
  Runner(const ModelWeights& w, const ForwardOptions& o, const ModelKernels& kernels,
         const Int8Weights* int8, const Bf16DotWeights* bf16)
      : pass_(w, o, kernels, int8, bf16), c_(pass_.c) {}

  void run(std::vector<Segment>& segs, std::vector<float>& out, std::vector<PrefixState>* states) {
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
    Chains chains(c_, segs, pass_);
    for (int64_t l = 0; l < c_.layers; ++l) {
      chains.select_layer(l, pass_);
      if (!run_layer(l, segs, trim && l == c_.layers - 1)) break;
    }
    chains.finish(states);
    out.resize(sz(pass_.rows * c_.hidden));
    rmsnorm_rows(pass_.k, pass_.ws.x.data(), out.data(), pass_.rows, c_.hidden,
                 pass_.w.final_norm().data(), true, pass_.eps(), pass_.threads);
  }

 private:
  // Layer l over the batch. last_trimmed (the last layer, some rows unread): after the mixer only
  // the read rows go on, moved to the front. False when no row is left to run.
  bool run_layer(int64_t l, const std::vector<Segment>& segs, bool last_trimmed) {
    const LayerWeights& lw = pass_.w.layers()[sz(l)];
    Workspace& ws = pass_.ws;
    const int64_t h = c_.hidden;
    rmsnorm_rows(pass_.k, ws.x.data(), ws.xn.data(), pass_.rows, h, lw.input_norm.data(), true,
                 pass_.eps(), pass_.threads);
    if (lw.full_attention) {
      run_attention(pass_, lw.attn, l, segs, last_trimmed);
    } else {
      run_gdn(pass_, lw.gdn, l, segs);
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
                std::vector<float>& out, std::vector<PrefixState>* states) {
  Runner(w, options, kernels, int8, bf16).run(segs, out, states);
}

}  // namespace kev
