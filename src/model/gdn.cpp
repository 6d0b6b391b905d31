// The GDN mixer (gdn.h): projections, the short convolution, normalisation and gates, the delta
// rule per value head, the gated norm and the output projection, in that order.
#include "model/gdn.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "kev/core/fixed_math.h"
#include "kev/core/threads.h"
#include "kev/cpu/vec.h"
#include "model/gdn_recurrence.h"

namespace kev {
namespace {

constexpr float kL2Eps = 1e-6f;

// torch.nn.functional.softplus (beta 1, threshold 20), over fixed_math.h's exp and log1p: libm's
// last bits differ between architectures, these do not.
inline float softplus(float x) {
  return x > 20.0f ? x : fixed_log1pf(fixed_expf(x));
}

// The step's arrays in the workspace (rows of the batch):
struct GdnArrays {
  float* raw;   // [T, conv_dim] pre-conv q | k | v (ws.qkv)
  float* conv;  // [T, conv_dim] post-conv, SiLU, q/k normalised (ws.aux1)
  float* z;     // [T, lin_v_total] the output gate's input (ws.big1)
  float* o;     // [T, lin_v_total] the delta rule's outputs (ws.big2)
  float* g;     // [T, linear_value_heads] a, then the log-decay g (ws.aux2)
  float* beta;  // [T, linear_value_heads] b, then beta (ws.mix: free until out_proj)
};

constexpr int64_t kConvBlock = 256, kMaxConvTaps = 8;

// One block of channels [c0, c1) of segment s's convolution with K <= kMaxConvTaps taps, in a
// channel-vectorisable form: per token, out = 0, then out += w_j * x_j for taps j = 0..K-1 in
// order (one rounding per multiply and per add, as conv_block_scalar), then SiLU.
void conv_block_taps(const LayerPass& pass, const GdnWeights& gw, const Segment& s,
                     const LayerState& in, const GdnArrays& a, int64_t c0, int64_t c1) {
  const int64_t cd = pass.c.conv_dim(), kk = pass.c.conv_kernel, hist = kk - 1;
  const bool has_hist = !in.conv.empty();
  const int64_t n = c1 - c0;
  float wt[kMaxConvTaps][kConvBlock];
  float zero[kConvBlock] = {};
  for (int64_t j = 0; j < kk; ++j)
    for (int64_t ch = 0; ch < n; ++ch) wt[j][ch] = gw.conv[sz((c0 + ch) * kk + j)];
  for (int64_t i = 0; i < s.len; ++i) {
    float* out = a.conv + (s.offset + i) * cd + c0;
    for (int64_t ch = 0; ch < n; ++ch) out[ch] = 0.0f;
    for (int64_t j = 0; j < kk; ++j) {
      const int64_t src = i - hist + j;  // index into the segment; < 0 means history
      const float* xr = src >= 0   ? a.raw + (s.offset + src) * cd + c0
                        : has_hist ? in.conv.data() + (hist + src) * cd + c0
                                   : zero;
      const float* wj = wt[j];
      for (int64_t ch = 0; ch < n; ++ch) out[ch] += wj[ch] * xr[ch];
    }
    pass.k.silu(out, n);
  }
}

// The same for any K, channel by channel.
void conv_block_scalar(const LayerPass& pass, const GdnWeights& gw, const Segment& s,
                       const LayerState& in, const GdnArrays& a, int64_t c0, int64_t c1) {
  const int64_t cd = pass.c.conv_dim(), kk = pass.c.conv_kernel, hist = kk - 1;
  const bool has_hist = !in.conv.empty();
  for (int64_t i = 0; i < s.len; ++i) {
    const int64_t t = s.offset + i;
    for (int64_t ch = c0; ch < c1; ++ch) {
      float acc = 0.0f;
      for (int64_t j = 0; j < kk; ++j) {
        int64_t src = i - hist + j;  // index into the segment; < 0 means history
        float xv;
        if (src >= 0)
          xv = a.raw[(s.offset + src) * cd + ch];
        else
          xv = has_hist ? in.conv[sz((hist + src) * cd + ch)] : 0.0f;
        acc += gw.conv[sz(ch * kk + j)] * xv;
      }
      a.conv[t * cd + ch] = vec::silu(acc);
    }
  }
}

// Causal depthwise convolution over (history, segment), then SiLU, for the segments of one wave
// (indices into segs): a task per segment and block of channels.
void causal_conv(const LayerPass& pass, const GdnWeights& gw, int64_t layer,
                 const std::vector<Segment>& segs, const std::vector<size_t>& wave,
                 const GdnArrays& a) {
  const int64_t cd = pass.c.conv_dim();
  const int64_t nblocks = (cd + kConvBlock - 1) / kConvBlock;
  parallel_for(
      wave.size() * sz(nblocks),
      [&](size_t task) {
        const Segment& s = segs[wave[task / sz(nblocks)]];
        const int64_t c0 = static_cast<int64_t>(task % sz(nblocks)) * kConvBlock;
        const int64_t c1 = std::min(cd, c0 + kConvBlock);
        if (pass.c.conv_kernel <= kMaxConvTaps)
          conv_block_taps(pass, gw, s, layer_in(s, layer), a, c0, c1);
        else
          conv_block_scalar(pass, gw, s, layer_in(s, layer), a, c0, c1);
      },
      pass.threads);
}

// q and k L2-normalised (q then scaled by dk^-0.5), a -> g and b -> beta, row by row.
void normalize_and_gate(const LayerPass& pass, const GdnWeights& gw, const GdnArrays& a) {
  const ModelConfig& c = pass.c;
  const int64_t cd = c.conv_dim(), lk = c.linear_key_heads, lv = c.linear_value_heads,
                dk = c.linear_key_dim;
  const float qscale = 1.0f / std::sqrt(static_cast<float>(dk));
  const ModelKernels& k = pass.k;
  parallel_for(
      sz(pass.rows),
      [&](size_t r) {
        const int64_t t = static_cast<int64_t>(r);
        for (int64_t hh = 0; hh < 2 * lk; ++hh) {
          float* x = a.conv + t * cd + hh * dk;
          float inv = 1.0f / std::sqrt(k.sum_sq(x, dk) + kL2Eps);
          k.scale(x, inv, dk);
          if (hh < lk) k.scale(x, qscale, dk);
        }
        for (int64_t hh = 0; hh < lv; ++hh) {
          float& g = a.g[t * lv + hh];
          g = -fixed_expf(gw.a_log[sz(hh)]) * softplus(g + gw.dt_bias[sz(hh)]);
          float& b = a.beta[t * lv + hh];
          b = vec::sigmoid(b);
        }
      },
      pass.threads);
}

// The segment's last K-1 pre-conv inputs (from its own rows, then its prefix's history, then
// zeros) as the extended state's conv history.
void save_conv_history(const LayerPass& pass, int64_t layer, const Segment& s, const float* raw,
                       LayerState& st) {
  const int64_t cd = pass.c.conv_dim(), hist = pass.c.conv_kernel - 1;
  const LayerState& in = layer_in(s, layer);
  st.conv.assign(sz(conv_history_floats(pass.c)), 0.0f);
  for (int64_t r = 0; r < hist; ++r) {
    int64_t src = s.len - hist + r;  // index into the segment
    const float* p = nullptr;
    if (src >= 0)
      p = raw + (s.offset + src) * cd;
    else if (!in.conv.empty())
      p = in.conv.data() + (hist + src) * cd;
    if (p) std::memcpy(st.conv.data() + r * cd, p, sz(cd) * 4);
  }
}

// The gated delta rule for the segments of one wave: a task per segment and value head, each from
// its prefix's state; a segment's final state into the state being built for it, if any.
void delta_rule(const LayerPass& pass, int64_t layer, const std::vector<Segment>& segs,
                const std::vector<size_t>& wave, const GdnArrays& a) {
  const ModelConfig& c = pass.c;
  const int64_t cd = c.conv_dim(), lk = c.linear_key_heads, lv = c.linear_value_heads,
                dk = c.linear_key_dim, dv = c.linear_value_dim, vt = c.lin_v_total(),
                group = lv / lk;
  for (size_t i : wave)
    if (pass.building[i]) pass.building[i]->s.assign(sz(recurrent_state_floats(c)), 0.0f);
  parallel_for(
      wave.size() * sz(lv),
      [&](size_t task) {
        const size_t si = wave[task / sz(lv)];
        const Segment& s = segs[si];
        LayerState* st = pass.building[si];
        const LayerState& in = layer_in(s, layer);
        const int64_t hh = static_cast<int64_t>(task % sz(lv));
        const int64_t kh = hh / group;
        std::vector<float> state(sz(dk * dv), 0.0f);
        if (!in.s.empty()) std::memcpy(state.data(), in.s.data() + hh * dk * dv, state.size() * 4);
        const float* row0 = a.conv + s.offset * cd;
        const GdnHeadView v{row0 + kh * dk,
                            row0 + lk * dk + kh * dk,
                            row0 + 2 * lk * dk + hh * dv,
                            cd,
                            a.g + s.offset * lv + hh,
                            a.beta + s.offset * lv + hh,
                            lv,
                            a.o + s.offset * vt + hh * dv,
                            vt};
        if (pass.gdn_mode == GdnMode::kChunked)
          gdn_chunked(pass.k, state.data(), v, s.len, dk, dv);
        else
          gdn_recurrent(pass.k, state.data(), v, s.len, dk, dv);
        if (st) std::memcpy(st->s.data() + hh * dk * dv, state.data(), state.size() * 4);
      },
      pass.threads);
}

// Gated RMSNorm per value head: rmsnorm(o) * w * silu(z).
void gated_norm(const LayerPass& pass, const GdnWeights& gw, const GdnArrays& a) {
  const int64_t lv = pass.c.linear_value_heads, dv = pass.c.linear_value_dim,
                vt = pass.c.lin_v_total();
  const ModelKernels& k = pass.k;
  const float eps = pass.eps();
  parallel_for(
      sz(pass.rows),
      [&](size_t r) {
        const int64_t t = static_cast<int64_t>(r);
        for (int64_t hh = 0; hh < lv; ++hh) {
          float* o = a.o + t * vt + hh * dv;
          const float* zz = a.z + t * vt + hh * dv;
          float inv = 1.0f / std::sqrt(k.sum_sq(o, dv) / static_cast<float>(dv) + eps);
          k.scale_mul_silu(o, inv, gw.norm.data(), zz, dv);
        }
      },
      pass.threads);
}

}  // namespace

void run_gdn(LayerPass& pass, const GdnWeights& gw, int64_t layer,
             const std::vector<Segment>& segs) {
  Workspace& ws = pass.ws;
  const GdnArrays a{ws.qkv.data(),  ws.aux1.data(), ws.big1.data(),
                    ws.big2.data(), ws.aux2.data(), ws.mix.data()};
  const int64_t h = pass.c.hidden;
  pass.project(ws.xn.data(), h, gw.qkv, a.raw);
  pass.project(ws.xn.data(), h, gw.z, a.z);
  pass.project_fp32(ws.xn.data(), h, gw.a, a.g);
  pass.project_fp32(ws.xn.data(), h, gw.b, a.beta);
  // Wave after wave: a segment continuing another reads the conv history and recurrent state
  // its predecessor saved in the wave before.
  for (const std::vector<size_t>& wave : pass.waves) {
    causal_conv(pass, gw, layer, segs, wave, a);
    for (size_t i : wave)
      if (pass.building[i]) save_conv_history(pass, layer, segs[i], a.raw, *pass.building[i]);
  }
  normalize_and_gate(pass, gw, a);
  for (const std::vector<size_t>& wave : pass.waves) delta_rule(pass, layer, segs, wave, a);
  gated_norm(pass, gw, a);
  pass.project(a.o, pass.c.lin_v_total(), gw.out, ws.mix.data());
}

}  // namespace kev
