// The Qwen3.5 text forward. Facts checked against the upstream Qwen3.5 implementation
// (Hugging Face transformers modeling_qwen3_5, which also carries the torch chunked and
// recurrent gated-delta-rule references):
// - RMSNorm: x * rsqrt(mean(x^2) + eps) * (1 + w), computed in FP32 (input, post-attention,
//   final, q_norm, k_norm). The GDN output norm is x * rsqrt(mean(x^2) + eps) * w * silu(z).
// - Attention: q_proj output viewed as [heads, 2 * head_dim], first half query, second half
//   gate; q_norm/k_norm per head; RoPE on the first rotary_dim dims with rotate_half pairs
//   (d, d + rot/2), inv_freq = theta^(-2i/rot); KV head of query head h is h / (heads /
//   kv_heads) (repeat_kv = repeat_interleave); scale head_dim^-0.5; softmax in FP32; output
//   * sigmoid(gate) before o_proj. For text the three mrope position streams are equal, so the
//   interleaved sections give plain RoPE. Angles here are computed in double then rounded
//   (upstream multiplies in FP32; the difference is below one FP32 ulp of the angle times pos).
// - GDN: in_proj_qkv output (q | k | v, all heads) goes through ONE causal depthwise conv
//   (kernel K, no bias, zero history or the cached last K-1 pre-conv inputs) then SiLU; then
//   split; beta = sigmoid(b); g = -exp(A_log) * softplus(a + dt_bias); q, k L2-normalised as
//   x * rsqrt(sum x^2 + 1e-6) (eps inside, added to the sum), then q * dk^-0.5; value head h
//   uses key head h / (LV / LK) (repeat_interleave, not tile); per token: decay S first, then
#include "model/layers.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <memory>

#include "kev/core/aligned.h"
#include "kev/core/bf16.h"
#include "kev/core/error.h"
#include "kev/core/fixed_math.h"
#include "kev/core/threads.h"
#include "kev/cpu/model_kernels.h"
#include "model/cpu_state.h"

namespace kev {
namespace {

constexpr float kL2Eps = 1e-6f;

// Every transcendental here is fixed_math.h's (correctly rounded float exp and log1p, double
// sin, cos and pow in a fixed order; sigmoid and SiLU are vec.h's over them): libm's last bits
// differ between architectures, these do not, so hidden states are byte-identical on x86-64
// and aarch64.
using vec::sigmoid;
using vec::silu;
// torch.nn.functional.softplus (beta 1, threshold 20).
inline float softplus(float x) {
  return x > 20.0f ? x : fixed_log1pf(fixed_expf(x));
}

// Scratch for one batch; sized once per call, so nothing is allocated per token or per layer.
// 64-byte aligned starts: rows are aligned too where a width is a multiple of 16 floats (every
// width at the released dimensions), so the kernels' row loads do not straddle cache lines.
struct Workspace {
  AlignedVector<float> x, xn, mix, big1, big2, qkv, aux1, aux2, cos, sin, rounded;
};

// Floats per token of each Workspace array (one place for allocate() and
// workspace_bytes_per_token()).
struct WorkspaceWidths {
  int64_t hidden, big, qkv, aux1, aux2, half_rotary, rounded;
};
WorkspaceWidths workspace_widths(const ModelConfig& c) {
  const int64_t big = std::max({c.intermediate, c.heads * c.head_dim * 2, c.lin_v_total()});
  const int64_t aux = std::max({c.kv_heads * c.head_dim, c.lin_v_heads, c.heads * c.head_dim});
  return {.hidden = c.hidden,
          .big = big,
          .qkv = std::max(c.conv_dim(), c.kv_heads * c.head_dim),
          .aux1 = std::max(aux, c.conv_dim()),
          .aux2 = aux,
          .half_rotary = c.rotary_dim / 2,
          // project()'s rounded input: the widest projection input
          .rounded = std::max({c.hidden, c.intermediate, c.heads * c.head_dim, c.lin_v_total()})};
}

void rmsnorm_rows(const ModelKernels& k, const float* x, float* out, int64_t rows, int64_t n,
                  const float* w, bool plus_one, float eps, size_t threads) {
  parallel_for(
      static_cast<size_t>(rows),
      [&](size_t r) {
        const float* xr = x + static_cast<int64_t>(r) * n;
        float* o = out + static_cast<int64_t>(r) * n;
        float inv = 1.0f / std::sqrt(k.sum_sq(xr, n) / static_cast<float>(n) + eps);
        for (int64_t i = 0; i < n; ++i) o[i] = xr[i] * inv * (plus_one ? 1.0f + w[i] : w[i]);
      },
      threads);
}

void rmsnorm_inplace(const ModelKernels& k, float* x, int64_t n, const float* w, float eps) {
  float inv = 1.0f / std::sqrt(k.sum_sq(x, n) / static_cast<float>(n) + eps);
  for (int64_t i = 0; i < n; ++i) x[i] = x[i] * inv * (1.0f + w[i]);
}

void rope_inplace(float* x, const float* c, const float* s, int64_t half) {
  for (int64_t i = 0; i < half; ++i) {
    float x1 = x[i], x2 = x[i + half];
    x[i] = x1 * c[i] - x2 * s[i];
    x[i + half] = x2 * c[i] + x1 * s[i];
  }
}

class Runner {
 public:
  Runner(const ModelWeights& w, const ForwardOptions& o, const ModelKernels& kernels,
         const Int8Weights* int8, const Bf16DotWeights* bf16)
      : w_(w),
        c_(w.config()),
        threads_(o.threads ? o.threads : default_workers()),
        mode_(o.gdn),
        precision_(o.precision),
        int8_(int8),
        bf16_(bf16),
        k_(kernels) {}

  // Runs the segments (each continuing its own `from`, which may differ between segments) and
  // writes final-normed hidden states [T, H]. With state_out (only for one segment) the
  // extended state is returned there.
  void run(std::vector<Segment>& segs, std::vector<float>& out, PrefixState* state_out) {
    total_ = 0;
    for (auto& s : segs) {
      s.offset = total_;
      total_ += s.len;
    }
    const int64_t t = total_, h = c_.hidden;
    allocate(t);
    embed(segs);
    rope_tables(segs);
    const bool trim = plan_reads(segs);
    std::shared_ptr<CpuState> extended;
    if (state_out) extended = std::make_shared<CpuState>(static_cast<size_t>(c_.layers));
    for (int64_t l = 0; l < c_.layers; ++l) {
      const LayerWeights& lw = w_.layers()[static_cast<size_t>(l)];
      LayerState* st = extended ? &extended->layers[static_cast<size_t>(l)] : nullptr;
      const bool last_trimmed = trim && l == c_.layers - 1;
      rmsnorm_rows(k_, ws_.x.data(), ws_.xn.data(), total_, h, lw.input_norm.data(), true, eps(),
                   threads_);
      if (lw.full_attention) {
        attention(lw.attn, l, segs, st, last_trimmed);
      } else {
        gdn(lw.gdn, l, segs, st);
        if (last_trimmed) keep_read_rows(ws_.mix.data(), h);
      }
      if (last_trimmed) {
        keep_read_rows(ws_.x.data(), h);
        total_ = static_cast<int64_t>(read_rows_.size());
        if (total_ == 0) break;
      }
      add_into_x();
      rmsnorm_rows(k_, ws_.x.data(), ws_.xn.data(), total_, h, lw.post_norm.data(), true, eps(),
                   threads_);
      mlp(lw);
      add_into_x();
    }
    if (state_out)
      *state_out = PrefixState{segs[0].from->length + segs[0].len, std::move(extended)};
    out.resize(static_cast<size_t>(total_ * h));
    rmsnorm_rows(k_, ws_.x.data(), out.data(), total_, h, w_.final_norm().data(), true, eps(),
                 threads_);
  }

 private:
  float eps() const { return static_cast<float>(c_.rms_eps); }
  size_t z(int64_t n) const { return static_cast<size_t>(n); }

  // Sets each segment's out_offset and, when some rows are not read, the batch rows that are
  // (read_rows_, ascending; read_mask_ per row). True when the last layer can skip rows.
  bool plan_reads(std::vector<Segment>& segs) {
    read_rows_.clear();
    read_mask_.assign(z(total_), 0);
    bool all = true;
    for (const Segment& s : segs) all = all && s.read_all;
    int64_t at = 0;
    for (Segment& s : segs) {
      s.out_offset = all ? s.offset : at;
      if (all) continue;
      for (int64_t i = 0; i < s.len; ++i) {
        if (!s.read_all && !std::binary_search(s.read.begin(), s.read.end(), i)) continue;
        read_rows_.push_back(s.offset + i);
        read_mask_[z(s.offset + i)] = 1;
        ++at;
      }
    }
    return !all;
  }

  // Moves the read rows of buf [T, width] to its front, in order (row read_rows_[j] -> j <= it).
  void keep_read_rows(float* buf, int64_t width) {
    for (size_t j = 0; j < read_rows_.size(); ++j) {
      const int64_t from = read_rows_[j], to = static_cast<int64_t>(j);
      if (from != to) std::memmove(buf + to * width, buf + from * width, z(width) * 4);
    }
  }

  void allocate(int64_t t) {
    const WorkspaceWidths w = workspace_widths(c_);
    ws_.x.resize(z(t * w.hidden));
    ws_.xn.resize(z(t * w.hidden));
    ws_.mix.resize(z(t * w.hidden));
    ws_.big1.resize(z(t * w.big));
    ws_.big2.resize(z(t * w.big));
    ws_.qkv.resize(z(t * w.qkv));
    ws_.aux1.resize(z(t * w.aux1));
    ws_.aux2.resize(z(t * w.aux2));
    ws_.cos.resize(z(t * w.half_rotary));
    ws_.sin.resize(z(t * w.half_rotary));
  }

  void embed(const std::vector<Segment>& segs) {
    const int64_t h = c_.hidden;
    for (const auto& s : segs)
      for (int64_t i = 0; i < s.len; ++i) {
        const uint16_t* src = w_.embed().data + static_cast<int64_t>(s.ids[i]) * h;
        float* dst = ws_.x.data() + (s.offset + i) * h;
        for (int64_t d = 0; d < h; ++d) {
          uint16_t b;
          std::memcpy(&b, src + d, 2);
          dst[d] = bf16_to_f32(b);
        }
      }
  }

  // Positions, explicit or implicit, are <= kMaxPosition = kFixedTrigMaxArg (model.cpp checks)
  // and rope_theta > 1 (config.cpp checks), so every inv_freq <= 1 and every angle lies within
  // fixed_sin / fixed_cos's exact range.
  void rope_tables(const std::vector<Segment>& segs) {
    static_assert(kMaxPosition <= kFixedTrigMaxArg);
    const int64_t half = c_.rotary_dim / 2;
    std::vector<double> inv_freq(z(half));
    for (int64_t f = 0; f < half; ++f)
      inv_freq[z(f)] = fixed_pow(
          c_.rope_theta, -2.0 * static_cast<double>(f) / static_cast<double>(c_.rotary_dim));
    for (const auto& s : segs)
      for (int64_t i = 0; i < s.len; ++i)
        for (int64_t f = 0; f < half; ++f) {
          const double angle = static_cast<double>(s.positions[z(i)]) * inv_freq[z(f)];
          ws_.cos[z((s.offset + i) * half + f)] = static_cast<float>(fixed_cos(angle));
          ws_.sin[z((s.offset + i) * half + f)] = static_cast<float>(fixed_sin(angle));
        }
  }

  void add_into_x() {
    const int64_t n = total_ * c_.hidden;
    for (int64_t i = 0; i < n; ++i) ws_.x[z(i)] += ws_.mix[z(i)];
  }

  // A big projection: runs in the model's precision (model.h).
  void gemm(const float* x, int64_t ldx, const Bf16Matrix& m, float* y) {
    project(k_, precision_, int8_, bf16_, x, total_, ldx, m, y, threads_, ws_.rounded);
  }
  // FP32 activations in every mode (the small GDN gate projections).
  void gemm_fp32(const float* x, int64_t ldx, const Bf16Matrix& m, float* y) {
    k_.gemm(x, total_, ldx, m, y, m.rows, threads_);
  }

  void mlp(const LayerWeights& lw) {
    const int64_t i_dim = c_.intermediate;
    gemm(ws_.xn.data(), c_.hidden, lw.gate, ws_.big1.data());
    gemm(ws_.xn.data(), c_.hidden, lw.up, ws_.big2.data());
    float* g = ws_.big1.data();
    const float* u = ws_.big2.data();
    parallel_for(
        z(total_),
        [&](size_t r) {
          const int64_t row = static_cast<int64_t>(r) * i_dim;
          k_.silu_mul(g + row, u + row, i_dim);
        },
        threads_);
    gemm(g, i_dim, lw.down, ws_.mix.data());
  }

  // A task's scratch: n zeroed floats from a 64-byte boundary, on the heap (not AlignedVector's
  // mapped pages: the attention tasks of a pass allocate and free it hundreds of times, and the
  // heap hands the same memory back without new page faults).
  struct HeapScratch {
    std::vector<float> raw;
    float* data;
    explicit HeapScratch(size_t n) : raw(n + 16, 0.0f) {
      void* at = raw.data();
      size_t space = raw.size() * sizeof(float);
      data = static_cast<float*>(std::align(64, n * sizeof(float), at, space));
    }
  };

  // ---- full attention ----
  // Layer `layer`'s cache of a segment's own prefix.
  static const LayerState& layer_in(const Segment& s, int64_t layer) {
    return cpu_state(*s.from).layers[static_cast<size_t>(layer)];
  }

  // trimmed (the last layer, some rows unread): queries and outputs of the read rows only; the
  // output projection then runs on them alone, moved to the front of the batch.
  void attention(const AttentionWeights& a, int64_t layer, const std::vector<Segment>& segs,
                 LayerState* st, bool trimmed) {
    const int64_t hd = c_.head_dim, nh = c_.heads, nkv = c_.kv_heads, half = c_.rotary_dim / 2;
    const int64_t qg_w = nh * hd * 2, kv_w = nkv * hd;
    float* qg = ws_.big1.data();  // [T, nh * 2hd]
    float* kb = ws_.qkv.data();   // [T, kv_w]
    float* vb = ws_.aux2.data();  // [T, kv_w]
    float* qb = ws_.big2.data();  // [T, nh * hd] normed + roped queries
    float* ao = ws_.aux1.data();  // [T, nh * hd]
    const bool any_query = !trimmed || !read_rows_.empty();
    if (any_query) gemm(ws_.xn.data(), c_.hidden, a.q, qg);
    gemm(ws_.xn.data(), c_.hidden, a.k, kb);
    gemm(ws_.xn.data(), c_.hidden, a.v, vb);
    parallel_for(
        z(total_),
        [&](size_t r) {
          const int64_t t = static_cast<int64_t>(r);
          const float* cs = ws_.cos.data() + t * half;
          const float* sn = ws_.sin.data() + t * half;
          for (int64_t hh = 0; any_query && hh < nh; ++hh) {
            float* q = qb + t * nh * hd + hh * hd;
            std::memcpy(q, qg + t * qg_w + hh * 2 * hd, z(hd) * 4);
            rmsnorm_inplace(k_, q, hd, a.q_norm.data(), eps());
            rope_inplace(q, cs, sn, half);
          }
          for (int64_t g = 0; g < nkv; ++g) {
            float* k = kb + t * kv_w + g * hd;
            rmsnorm_inplace(k_, k, hd, a.k_norm.data(), eps());
            rope_inplace(k, cs, sn, half);
          }
        },
        threads_);
    const float scale = 1.0f / std::sqrt(static_cast<float>(hd));
    // Blocked: a task is a block of up to kQueryRows query rows of one segment with the query
    // heads of one key/value head (its "pairs", packed contiguously), and walks the keys and
    // values in blocks of kKeyRows, so each block is read from memory once per task and each
    // key or value row read serves several pairs (dot_block, axpy_block). Every score is still
    // one dot of its own (bit for bit vec::dot_fused), every pair's softmax runs over its whole
    // score vector in key order, and every output sums p_j v_j in key order (axpy_rows' fused
    // order): the bits do not depend on the blocking.
    constexpr int64_t kQueryRows = kAttentionQueryRows, kKeyRows = 128;
    const int64_t group = nh / nkv;
    struct Task {
      size_t seg;
      int64_t g, r0, r1;
    };
    std::vector<Task> tasks;
    for (size_t si = 0; si < segs.size(); ++si)
      for (int64_t g = 0; g < nkv; ++g)
        for (int64_t r0 = 0; r0 < segs[si].len; r0 += kQueryRows)
          tasks.push_back({si, g, r0, std::min(segs[si].len, r0 + kQueryRows)});
    parallel_for(
        tasks.size(),
        [&](size_t ti) {
          const Task& task = tasks[ti];
          const Segment& s = segs[task.seg];
          const LayerState& in = layer_in(s, layer);
          const int64_t g = task.g;
          int64_t past = 0;
          for (const auto& b : in.kv) past += static_cast<int64_t>(b->k.size()) / kv_w;
          // The rows of this block whose output is read (all but in a trimmed last layer).
          std::vector<int64_t> rows;
          for (int64_t i = task.r0; i < task.r1; ++i)
            if (!trimmed || read_mask_[z(s.offset + i)]) rows.push_back(i);
          if (rows.empty()) return;
          const int64_t width = past + rows.back() + 1;  // the longest score vector
          // Pair q = r * group + h is row rows[r] with query head g * group + h: its query at
          // qp + q * hd, its output at op + q * hd, its scores (then probabilities) against key
          // j at p[q * width + j].
          const int64_t pairs = static_cast<int64_t>(rows.size()) * group;
          HeapScratch qp_buf(z(pairs * hd)), op_buf(z(pairs * hd)), p_buf(z(pairs * width));
          float* const qp = qp_buf.data;
          float* const op = op_buf.data;
          float* const p = p_buf.data;
          for (size_t r = 0; r < rows.size(); ++r)
            std::memcpy(qp + static_cast<int64_t>(r) * group * hd,
                        qb + (s.offset + rows[r]) * nh * hd + g * group * hd, z(group * hd) * 4);
          // Runs fn(key rows [k0, k1) of `base`, at score index at + k0) block by block, for the
          // cached blocks, then this segment's keys up to the block's last row.
          auto over_keys = [&](auto&& keys_of, auto&& fn) {
            int64_t at = 0;
            for (const auto& b : in.kv) {
              const int64_t n = static_cast<int64_t>(b->k.size()) / kv_w;
              for (int64_t k0 = 0; k0 < n; k0 += kKeyRows)
                fn(keys_of(*b) + g * hd, at, k0, std::min(n, k0 + kKeyRows), false);
              at += n;
            }
            for (int64_t k0 = 0; k0 <= rows.back(); k0 += kKeyRows)
              fn(nullptr, past, k0, std::min(rows.back() + 1, k0 + kKeyRows), true);
          };
          // Of this segment's own keys a row sees those up to itself (causal): rows before
          // `whole` end inside [k0, k1) and take their keys pair by pair; the rest see the whole
          // block and take it together.
          auto whole_from = [&](int64_t k1, bool own) {
            size_t r = 0;
            while (own && r < rows.size() && rows[r] + 1 < k1) ++r;
            return static_cast<int64_t>(r);
          };
          const float* own_k = kb + s.offset * kv_w + g * hd;
          const float* own_v = vb + s.offset * kv_w + g * hd;
          over_keys([](const KvBlock& b) { return b.k.data(); },
                    [&](const float* base, int64_t at, int64_t k0, int64_t k1, bool own) {
                      if (own) base = own_k;
                      const int64_t whole = whole_from(k1, own);
                      for (int64_t r = 0; r < whole; ++r) {
                        const int64_t end = std::min(k1, rows[z(r)] + 1);
                        for (int64_t q = r * group; end > k0 && q < (r + 1) * group; ++q)
                          k_.dot_rows(qp + q * hd, base + k0 * kv_w, kv_w, end - k0, hd,
                                      p + q * width + at + k0);
                      }
                      const int64_t q0 = whole * group;
                      k_.dot_block(qp + q0 * hd, hd, pairs - q0, base + k0 * kv_w, kv_w, k1 - k0,
                                   hd, p + q0 * width + at + k0, width);
                    });
          for (size_t r = 0; r < rows.size(); ++r) {
            float* const pr0 = p + static_cast<int64_t>(r) * group * width;
            const int64_t n = past + rows[r] + 1;  // the row's keys: its pairs share them
            for (int64_t h = 0; h < group; ++h) {
              float* pr = pr0 + h * width;
              k_.exp_shifted(pr, k_.scale_max(pr, scale, n), n);
            }
            // Each pair's sum in key order; four pairs side by side (independent chains, so
            // the adds overlap instead of waiting on one another).
            for (int64_t h0 = 0; h0 < group; h0 += 4) {
              const float* src[4];
              for (int64_t u = 0; u < 4; ++u) src[u] = pr0 + std::min(h0 + u, group - 1) * width;
              float sum[4] = {0.0f, 0.0f, 0.0f, 0.0f};
              for (int64_t j = 0; j < n; ++j)
                for (int u = 0; u < 4; ++u) sum[u] += src[u][j];
              for (int64_t h = h0; h < std::min(group, h0 + 4); ++h)
                k_.divide(pr0 + h * width, sum[h - h0], n);
            }
          }
          over_keys([](const KvBlock& b) { return b.v.data(); },
                    [&](const float* base, int64_t at, int64_t k0, int64_t k1, bool own) {
                      if (own) base = own_v;
                      const int64_t whole = whole_from(k1, own);
                      for (int64_t r = 0; r < whole; ++r) {
                        const int64_t end = std::min(k1, rows[z(r)] + 1);
                        for (int64_t q = r * group; end > k0 && q < (r + 1) * group; ++q)
                          k_.axpy_rows(op + q * hd, p + q * width + at + k0, base + k0 * kv_w, kv_w,
                                       end - k0, hd);
                      }
                      const int64_t q0 = whole * group;
                      k_.axpy_block(op + q0 * hd, hd, pairs - q0, p + q0 * width + at + k0, width,
                                    base + k0 * kv_w, kv_w, k1 - k0, hd);
                    });
          for (size_t r = 0; r < rows.size(); ++r)
            for (int64_t h = 0; h < group; ++h) {
              const int64_t i = rows[r], head = g * group + h;
              float* o = ao + (s.offset + i) * nh * hd + head * hd;
              std::memcpy(o, op + (static_cast<int64_t>(r) * group + h) * hd, z(hd) * 4);
              k_.mul_sigmoid(o, qg + (s.offset + i) * qg_w + head * 2 * hd + hd, hd);
            }
        },
        threads_);
    if (st) {
      const Segment& s = segs[0];
      const LayerState& in = layer_in(s, layer);
      // The blocks of the state continued (shared), then this segment's own.
      auto block = std::make_shared<KvBlock>();
      block->k.assign(kb + s.offset * kv_w, kb + (s.offset + s.len) * kv_w);
      block->v.assign(vb + s.offset * kv_w, vb + (s.offset + s.len) * kv_w);
      st->kv = in.kv;
      st->kv.push_back(std::move(block));
    }
    if (trimmed) {
      keep_read_rows(ao, nh * hd);
      if (read_rows_.empty()) return;
      const int64_t all_rows = total_;
      total_ = static_cast<int64_t>(read_rows_.size());  // the projection's rows
      gemm(ao, nh * hd, a.o, ws_.mix.data());
      total_ = all_rows;
      return;
    }
    gemm(ao, nh * hd, a.o, ws_.mix.data());
  }

  // ---- Gated DeltaNet ----
  void gdn(const GdnWeights& gw, int64_t layer, const std::vector<Segment>& segs, LayerState* st) {
    const int64_t cd = c_.conv_dim(), kk = c_.conv_kernel, lk = c_.lin_k_heads, lv = c_.lin_v_heads,
                  dk = c_.lin_k_dim, dv = c_.lin_v_dim, vt = c_.lin_v_total();
    float* raw = ws_.qkv.data();    // [T, cd] pre-conv
    float* conv = ws_.aux1.data();  // [T, cd] post-conv, SiLU, q/k normalised
    float* zb = ws_.big1.data();    // [T, vt]
    float* ob = ws_.big2.data();    // [T, vt]
    float* ab = ws_.aux2.data();    // [T, lv] -> g
    float* bb = ws_.mix.data();     // [T, lv] -> beta (mix is free until out_proj)
    gemm(ws_.xn.data(), c_.hidden, gw.qkv, raw);
    gemm(ws_.xn.data(), c_.hidden, gw.z, zb);
    gemm_fp32(ws_.xn.data(), c_.hidden, gw.a, ab);
    gemm_fp32(ws_.xn.data(), c_.hidden, gw.b, bb);
    const int64_t hist = kk - 1;
    // Causal depthwise conv over (history, segment) then SiLU; rows independent per segment.
    constexpr int64_t cblock = 256, kMaxConvTaps = 8;
    const int64_t nblocks = (cd + cblock - 1) / cblock;
    parallel_for(
        segs.size() * z(nblocks),
        [&](size_t task) {
          const Segment& s = segs[task / z(nblocks)];
          const LayerState& in = layer_in(s, layer);
          const bool has_hist = !in.conv.empty();
          const int64_t c0 = static_cast<int64_t>(task % z(nblocks)) * cblock;
          const int64_t c1 = std::min(cd, c0 + cblock);
          if (kk <= kMaxConvTaps) {
            // Channel-vectorisable form: per token, out = 0, then out += w_j * x_j for taps
            // j = 0..K-1 in order (one rounding per multiply and per add, as below), then SiLU.
            const int64_t n = c1 - c0;
            float wt[kMaxConvTaps][cblock];
            float zero[cblock] = {};
            for (int64_t j = 0; j < kk; ++j)
              for (int64_t ch = 0; ch < n; ++ch) wt[j][ch] = gw.conv[z((c0 + ch) * kk + j)];
            for (int64_t i = 0; i < s.len; ++i) {
              float* out = conv + (s.offset + i) * cd + c0;
              for (int64_t ch = 0; ch < n; ++ch) out[ch] = 0.0f;
              for (int64_t j = 0; j < kk; ++j) {
                const int64_t src = i - hist + j;  // index into the segment; < 0 means history
                const float* xr = src >= 0   ? raw + (s.offset + src) * cd + c0
                                  : has_hist ? in.conv.data() + (hist + src) * cd + c0
                                             : zero;
                const float* wj = wt[j];
                for (int64_t ch = 0; ch < n; ++ch) out[ch] += wj[ch] * xr[ch];
              }
              k_.silu(out, n);
            }
            return;
          }
          for (int64_t i = 0; i < s.len; ++i) {
            const int64_t t = s.offset + i;
            for (int64_t ch = c0; ch < c1; ++ch) {
              float acc = 0.0f;
              for (int64_t j = 0; j < kk; ++j) {
                int64_t src = i - hist + j;  // index into the segment; < 0 means history
                float xv;
                if (src >= 0)
                  xv = raw[(s.offset + src) * cd + ch];
                else
                  xv = has_hist ? in.conv[z((hist + src) * cd + ch)] : 0.0f;
                acc += gw.conv[z(ch * kk + j)] * xv;
              }
              conv[t * cd + ch] = silu(acc);
            }
          }
        },
        threads_);
    const float qscale = 1.0f / std::sqrt(static_cast<float>(dk));
    parallel_for(
        z(total_),
        [&](size_t r) {
          const int64_t t = static_cast<int64_t>(r);
          for (int64_t hh = 0; hh < 2 * lk; ++hh) {
            float* x = conv + t * cd + hh * dk;
            float inv = 1.0f / std::sqrt(k_.sum_sq(x, dk) + kL2Eps);
            k_.scale(x, inv, dk);
            if (hh < lk) k_.scale(x, qscale, dk);
          }
          for (int64_t hh = 0; hh < lv; ++hh) {
            float& a = ab[t * lv + hh];
            a = -fixed_expf(gw.a_log[z(hh)]) * softplus(a + gw.dt_bias[z(hh)]);
            float& b = bb[t * lv + hh];
            b = sigmoid(b);
          }
        },
        threads_);
    if (st) {
      const Segment& s = segs[0];
      const LayerState& in = layer_in(s, layer);
      const bool has_hist = !in.conv.empty();
      st->conv.assign(z(hist * cd), 0.0f);
      for (int64_t r = 0; r < hist; ++r) {
        int64_t src = s.len - hist + r;  // index into the segment
        const float* p = nullptr;
        if (src >= 0)
          p = raw + (s.offset + src) * cd;
        else if (has_hist)
          p = in.conv.data() + (hist + src) * cd;
        if (p) std::memcpy(st->conv.data() + r * cd, p, z(cd) * 4);
      }
      st->s.assign(z(lv * dk * dv), 0.0f);
    }
    const int64_t group = lv / lk;
    parallel_for(
        segs.size() * z(lv),
        [&](size_t task) {
          const Segment& s = segs[task / z(lv)];
          const LayerState& in = layer_in(s, layer);
          const int64_t hh = static_cast<int64_t>(task % z(lv));
          const int64_t kh = hh / group;
          std::vector<float> state(z(dk * dv), 0.0f);
          if (!in.s.empty())
            std::memcpy(state.data(), in.s.data() + hh * dk * dv, state.size() * 4);
          HeadView v{conv + s.offset * cd + kh * dk,
                     conv + s.offset * cd + lk * dk + kh * dk,
                     conv + s.offset * cd + 2 * lk * dk + hh * dv,
                     cd,
                     ab + s.offset * lv + hh,
                     bb + s.offset * lv + hh,
                     lv,
                     ob + s.offset * vt + hh * dv,
                     vt};
          if (mode_ == GdnMode::kChunked)
            gdn_chunked(state.data(), v, s.len, dk, dv);
          else
            gdn_recurrent(state.data(), v, s.len, dk, dv);
          if (st) std::memcpy(st->s.data() + hh * dk * dv, state.data(), state.size() * 4);
        },
        threads_);
    // Gated RMSNorm per value head: rmsnorm(o) * w * silu(z).
    parallel_for(
        z(total_),
        [&](size_t r) {
          const int64_t t = static_cast<int64_t>(r);
          for (int64_t hh = 0; hh < lv; ++hh) {
            float* o = ob + t * vt + hh * dv;
            const float* zz = zb + t * vt + hh * dv;
            float inv = 1.0f / std::sqrt(k_.sum_sq(o, dv) / static_cast<float>(dv) + eps());
            k_.scale_mul_silu(o, inv, gw.norm.data(), zz, dv);
          }
        },
        threads_);
    gemm(ob, vt, gw.out, ws_.mix.data());
  }

  struct HeadView {
    const float *q, *k, *v;
    int64_t qkv_stride;
    const float *g, *beta;
    int64_t gb_stride;
    float* o;
    int64_t o_stride;
  };

  void gdn_recurrent(float* s, const HeadView& h, int64_t len, int64_t dk, int64_t dv) const {
    std::vector<float> eg(z2(len)), beta(z2(len));
    for (int64_t t = 0; t < len; ++t) {
      eg[z2(t)] = fixed_expf(h.g[t * h.gb_stride]);
      beta[z2(t)] = h.beta[t * h.gb_stride];
    }
    k_.gdn_steps(s, dk, dv, len,
                 {h.q, h.k, h.v, h.qkv_stride, eg.data(), beta.data(), h.o, h.o_stride});
  }

  // Chunked form (chunk 64): within a chunk with cumulative log-decay c_i,
  //   A[i][j] = beta_i (k_i . k_j) exp(c_i - c_j) for j < i; (I + A) vnew = r with
  //   r_i = beta_i (v_i - exp(c_i) S^T k_i), solved by forward substitution;
  //   o_i = exp(c_i) S^T q_i + sum_{j<=i} (q_i . k_j) exp(c_i - c_j) vnew_j,
  //   S <- exp(c_last) S + sum_j exp(c_last - c_j) k_j vnew_j^T.
  // (The same UT-transform algebra as upstream's torch chunked reference.)
  void gdn_chunked(float* s, const HeadView& h, int64_t len, int64_t dk, int64_t dv) const {
    std::vector<float> cum(kGdnChunk), u(z2(kGdnChunk * dv)), kd(z2(dk));
    for (int64_t c0 = 0; c0 < len; c0 += kGdnChunk) {
      const int64_t n = std::min(kGdnChunk, len - c0);
      auto q = [&](int64_t i) { return h.q + (c0 + i) * h.qkv_stride; };
      auto k = [&](int64_t i) { return h.k + (c0 + i) * h.qkv_stride; };
      auto v = [&](int64_t i) { return h.v + (c0 + i) * h.qkv_stride; };
      auto beta = [&](int64_t i) { return h.beta[(c0 + i) * h.gb_stride]; };
      float acc = 0.0f;
      for (int64_t i = 0; i < n; ++i) {
        acc += h.g[(c0 + i) * h.gb_stride];
        cum[z2(i)] = acc;
      }
      for (int64_t i = 0; i < n; ++i) {
        float* ui = u.data() + i * dv;  // becomes vnew_i
        const float bi = beta(i), ei = fixed_expf(cum[z2(i)]);
        std::fill(ui, ui + dv, 0.0f);
        for (int64_t d = 0; d < dk; ++d) k_.axpy(ui, k(i)[d], s + d * dv, dv);  // S^T k_i
        for (int64_t d = 0; d < dv; ++d) ui[d] = bi * (v(i)[d] - ei * ui[d]);
        for (int64_t j = 0; j < i; ++j) {
          float aij = bi * k_.dot(k(i), k(j), dk) * fixed_expf(cum[z2(i)] - cum[z2(j)]);
          k_.axpy(ui, -aij, u.data() + j * dv, dv);
        }
      }
      // Outputs: inter-chunk read of the old state plus intra-chunk attention.
      for (int64_t i = 0; i < n; ++i) {
        float* o = h.o + (c0 + i) * h.o_stride;
        std::fill(o, o + dv, 0.0f);
        const float ei = fixed_expf(cum[z2(i)]);
        for (int64_t d = 0; d < dk; ++d) k_.axpy(o, ei * q(i)[d], s + d * dv, dv);
        for (int64_t j = 0; j <= i; ++j) {
          float qk = k_.dot(q(i), k(j), dk) * fixed_expf(cum[z2(i)] - cum[z2(j)]);
          k_.axpy(o, qk, u.data() + j * dv, dv);
        }
      }
      const float last = cum[z2(n - 1)];
      k_.scale(s, fixed_expf(last), dk * dv);
      for (int64_t j = 0; j < n; ++j) {
        const float ej = fixed_expf(last - cum[z2(j)]);
        for (int64_t d = 0; d < dk; ++d) kd[z2(d)] = ej * k(j)[d];
        for (int64_t d = 0; d < dk; ++d) k_.axpy(s + d * dv, kd[z2(d)], u.data() + j * dv, dv);
      }
    }
  }
  static size_t z2(int64_t n) { return static_cast<size_t>(n); }

  const ModelWeights& w_;
  const ModelConfig& c_;
  size_t threads_;
  GdnMode mode_;
  Precision precision_;
  const Int8Weights* int8_;
  const Bf16DotWeights* bf16_;
  const ModelKernels& k_;
  Workspace ws_;
  int64_t total_ = 0;
  std::vector<int64_t> read_rows_;  // plan_reads
  std::vector<char> read_mask_;
};

}  // namespace

void run_layers(const ModelWeights& w, const ForwardOptions& options, const ModelKernels& kernels,
                const Int8Weights* int8, const Bf16DotWeights* bf16, std::vector<Segment>& segs,
                std::vector<float>& out, PrefixState* state_out) {
  Runner(w, options, kernels, int8, bf16).run(segs, out, state_out);
}

size_t attention_scratch_bytes_per_key(const ModelConfig& c, size_t threads) {
  const auto pairs = static_cast<size_t>(kAttentionQueryRows * (c.heads / c.kv_heads));
  return threads * pairs * sizeof(float);
}

size_t workspace_bytes_per_token(const ModelConfig& c, Precision p) {
  const WorkspaceWidths w = workspace_widths(c);
  // x, xn, mix, the returned hidden states, and the rest of the workspace.
  int64_t floats = 4 * w.hidden + 2 * w.big + w.qkv + w.aux1 + w.aux2 + 2 * w.half_rotary;
  if (p != Precision::kFp32) floats += w.rounded;
  return static_cast<size_t>(floats) * sizeof(float);
}

}  // namespace kev
