// Full attention (attention.h): the projections, q/k norms and RoPE, the blocked tasks (scores,
// softmax, weighted values, the gate), the saved keys/values and the output projection.
#include "model/attention.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <memory>

#include "kev/core/threads.h"

namespace kev {
namespace {

constexpr int64_t kKeyRows = 128;  // key/value rows per block a task walks

// The step's arrays in the workspace.
struct AttentionArrays {
  float* qg;   // [T, heads * 2 head_dim] query | gate per head (ws.big1)
  float* k;    // [T, kv_heads * head_dim] keys, normed and roped (ws.qkv)
  float* v;    // [T, kv_heads * head_dim] values (ws.aux2)
  float* q;    // [T, heads * head_dim] queries, normed and roped (ws.big2)
  float* out;  // [T, heads * head_dim] gated outputs, o_proj's input (ws.aux1)
};

// A task's scratch: n zeroed floats from a 64-byte boundary, on the heap (not AlignedVector's
// mapped pages: the attention tasks of a pass allocate and free it hundreds of times, and the
// heap hands the same memory back without new page faults).
struct TaskScratch {
  std::vector<float> raw;
  float* data;
  explicit TaskScratch(size_t n) : raw(n + 16, 0.0f) {
    void* at = raw.data();
    size_t space = raw.size() * sizeof(float);
    data = static_cast<float*>(std::align(64, n * sizeof(float), at, space));
  }
};

// Queries (unless none is read) and keys: per-head RMSNorm, then RoPE; row by row.
void norm_and_rope(const LayerPass& pass, const AttentionWeights& w, const AttentionArrays& a,
                   bool any_query) {
  const ModelConfig& c = pass.c;
  const int64_t hd = c.head_dim, nh = c.heads, nkv = c.kv_heads, half = c.rotary_dim / 2;
  const int64_t qg_w = nh * hd * 2, kv_w = nkv * hd;
  const float eps = pass.eps();
  parallel_for(
      sz(pass.rows),
      [&](size_t r) {
        const int64_t t = static_cast<int64_t>(r);
        const float* cs = pass.ws.cos.data() + t * half;
        const float* sn = pass.ws.sin.data() + t * half;
        for (int64_t hh = 0; any_query && hh < nh; ++hh) {
          float* q = a.q + t * nh * hd + hh * hd;
          std::memcpy(q, a.qg + t * qg_w + hh * 2 * hd, sz(hd) * 4);
          rmsnorm_inplace(pass.k, q, hd, w.q_norm.data(), eps);
          rope_inplace(q, cs, sn, half);
        }
        for (int64_t g = 0; g < nkv; ++g) {
          float* k = a.k + t * kv_w + g * hd;
          rmsnorm_inplace(pass.k, k, hd, w.k_norm.data(), eps);
          rope_inplace(k, cs, sn, half);
        }
      },
      pass.threads);
}

struct AttentionTask {
  size_t seg;
  int64_t g, r0, r1;  // key/value head g, the segment's query rows [r0, r1)
};

std::vector<AttentionTask> plan_tasks(const std::vector<Segment>& segs,
                                      const std::vector<size_t>& wave, int64_t kv_heads) {
  std::vector<AttentionTask> tasks;
  for (size_t si : wave)
    for (int64_t g = 0; g < kv_heads; ++g)
      for (int64_t r0 = 0; r0 < segs[si].len; r0 += kAttentionQueryRows)
        tasks.push_back({si, g, r0, std::min(segs[si].len, r0 + kAttentionQueryRows)});
  return tasks;
}

// One task: the read rows of a block of one segment's query rows, with the query heads of one
// key/value head. Pair q = r * group + h is row rows[r] with query head g * group + h: its query
// at qp + q * hd, its output at op + q * hd, its scores (then probabilities) against key j at
// p[q * width + j].
class AttentionBlock {
 public:
  AttentionBlock(const LayerPass& pass, const AttentionArrays& a, const Segment& s,
                 const LayerState& in, int64_t g, std::vector<int64_t> rows)
      : k_(pass.k),
        a_(a),
        s_(s),
        in_(in),
        g_(g),
        hd_(pass.c.head_dim),
        nh_(pass.c.heads),
        kv_w_(pass.c.kv_heads * pass.c.head_dim),
        group_(pass.c.heads / pass.c.kv_heads),
        rows_(std::move(rows)),
        past_(past_keys(in, kv_w_)),
        width_(past_ + rows_.back() + 1),  // the longest score vector
        pairs_(static_cast<int64_t>(rows_.size()) * group_),
        qp_(sz(pairs_ * hd_)),
        op_(sz(pairs_ * hd_)),
        p_(sz(pairs_ * width_)) {}

  void run() {
    gather_queries();
    scores();
    softmax();
    weighted_values();
    store_gated();
  }

 private:
  static int64_t past_keys(const LayerState& in, int64_t kv_w) {
    int64_t past = 0;
    for (const auto& b : in.kv) past += static_cast<int64_t>(b->k.size()) / kv_w;
    return past;
  }

  void gather_queries() {
    for (size_t r = 0; r < rows_.size(); ++r)
      std::memcpy(qp_.data + static_cast<int64_t>(r) * group_ * hd_,
                  a_.q + (s_.offset + rows_[r]) * nh_ * hd_ + g_ * group_ * hd_,
                  sz(group_ * hd_) * 4);
  }

  // Runs fn(key rows [k0, k1) of `base`, at score index at + k0, own) block by block, for the
  // prefix's blocks, then this segment's own keys up to the task's last row (base null: fn
  // takes the segment's own array).
  template <class RowsOf, class Fn>
  void over_keys(RowsOf rows_of, Fn fn) const {
    int64_t at = 0;
    for (const auto& b : in_.kv) {
      const int64_t n = static_cast<int64_t>(b->k.size()) / kv_w_;
      for (int64_t k0 = 0; k0 < n; k0 += kKeyRows)
        fn(rows_of(*b) + g_ * hd_, at, k0, std::min(n, k0 + kKeyRows), false);
      at += n;
    }
    for (int64_t k0 = 0; k0 <= rows_.back(); k0 += kKeyRows)
      fn(nullptr, past_, k0, std::min(rows_.back() + 1, k0 + kKeyRows), true);
  }

  // Of this segment's own keys a row sees those up to itself (causal): rows before the one
  // returned end inside [k0, k1) and take their keys pair by pair; the rest see the whole block
  // and take it together.
  int64_t whole_from(int64_t k1, bool own) const {
    size_t r = 0;
    while (own && r < rows_.size() && rows_[r] + 1 < k1) ++r;
    return static_cast<int64_t>(r);
  }

  // Runs the causal walk over over_keys' blocks (`own`: this segment's key or value array): the
  // pairs of a row that ends inside a block take its keys up to their own, one pair at a time
  // (pair(q, rows, n, column)), the rest the whole block together (block(q0, rows, n, column));
  // `rows` points at the block's first key row, `column` is its first score index.
  template <class RowsOf, class Pair, class Block>
  void over_causal_blocks(const float* own, RowsOf rows_of, Pair pair, Block block) const {
    over_keys(rows_of, [&](const float* base, int64_t at, int64_t k0, int64_t k1, bool is_own) {
      const float* rows = (is_own ? own : base) + k0 * kv_w_;
      const int64_t whole = whole_from(k1, is_own);
      for (int64_t r = 0; r < whole; ++r) {
        const int64_t end = std::min(k1, rows_[sz(r)] + 1);
        for (int64_t q = r * group_; end > k0 && q < (r + 1) * group_; ++q)
          pair(q, rows, end - k0, at + k0);
      }
      block(whole * group_, rows, k1 - k0, at + k0);
    });
  }

  void scores() {
    over_causal_blocks(
        a_.k + s_.offset * kv_w_ + g_ * hd_, [](const KvBlock& b) { return b.k.data(); },
        [&](int64_t q, const float* keys, int64_t n, int64_t col) {
          k_.dot_rows(qp_.data + q * hd_, keys, kv_w_, n, hd_, p_.data + q * width_ + col);
        },
        [&](int64_t q0, const float* keys, int64_t n, int64_t col) {
          k_.dot_block(qp_.data + q0 * hd_, hd_, pairs_ - q0, keys, kv_w_, n, hd_,
                       p_.data + q0 * width_ + col, width_);
        });
  }

  // Each pair's scores scaled, shifted by their max and exponentiated, then divided by their
  // sum in key order; four pairs' sums side by side (independent chains, so the adds overlap
  // instead of waiting on one another).
  void softmax() {
    const float scale = 1.0f / std::sqrt(static_cast<float>(hd_));
    for (size_t r = 0; r < rows_.size(); ++r) {
      float* const pr0 = p_.data + static_cast<int64_t>(r) * group_ * width_;
      const int64_t n = past_ + rows_[r] + 1;  // the row's keys: its pairs share them
      for (int64_t h = 0; h < group_; ++h) {
        float* pr = pr0 + h * width_;
        k_.exp_shifted(pr, k_.scale_max(pr, scale, n), n);
      }
      for (int64_t h0 = 0; h0 < group_; h0 += 4) {
        const float* src[4];
        for (int64_t u = 0; u < 4; ++u) src[u] = pr0 + std::min(h0 + u, group_ - 1) * width_;
        float sum[4] = {0.0f, 0.0f, 0.0f, 0.0f};
        for (int64_t j = 0; j < n; ++j)
          for (int u = 0; u < 4; ++u) sum[u] += src[u][j];
        for (int64_t h = h0; h < std::min(group_, h0 + 4); ++h)
          k_.divide(pr0 + h * width_, sum[h - h0], n);
      }
    }
  }

  void weighted_values() {
    over_causal_blocks(
        a_.v + s_.offset * kv_w_ + g_ * hd_, [](const KvBlock& b) { return b.v.data(); },
        [&](int64_t q, const float* values, int64_t n, int64_t col) {
          k_.axpy_rows(op_.data + q * hd_, p_.data + q * width_ + col, values, kv_w_, n, hd_);
        },
        [&](int64_t q0, const float* values, int64_t n, int64_t col) {
          k_.axpy_block(op_.data + q0 * hd_, hd_, pairs_ - q0, p_.data + q0 * width_ + col, width_,
                        values, kv_w_, n, hd_);
        });
  }

  // Each pair's output times sigmoid(gate), into the batch's output rows.
  void store_gated() {
    const int64_t qg_w = nh_ * hd_ * 2;
    for (size_t r = 0; r < rows_.size(); ++r)
      for (int64_t h = 0; h < group_; ++h) {
        const int64_t i = rows_[r], head = g_ * group_ + h;
        float* o = a_.out + (s_.offset + i) * nh_ * hd_ + head * hd_;
        std::memcpy(o, op_.data + (static_cast<int64_t>(r) * group_ + h) * hd_, sz(hd_) * 4);
        k_.mul_sigmoid(o, a_.qg + (s_.offset + i) * qg_w + head * 2 * hd_ + hd_, hd_);
      }
  }

  const ModelKernels& k_;
  const AttentionArrays& a_;
  const Segment& s_;
  const LayerState& in_;
  const int64_t g_, hd_, nh_, kv_w_, group_;
  const std::vector<int64_t> rows_;  // ascending, not empty
  const int64_t past_, width_, pairs_;
  TaskScratch qp_, op_, p_;
};

// Runs every task of one wave's plan; a task whose rows are all unread (trimmed) does nothing.
void run_tasks(const LayerPass& pass, const AttentionArrays& a, int64_t layer,
               const std::vector<Segment>& segs, const std::vector<size_t>& wave, bool trimmed) {
  const std::vector<AttentionTask> tasks = plan_tasks(segs, wave, pass.c.kv_heads);
  parallel_for(
      tasks.size(),
      [&](size_t ti) {
        const AttentionTask& task = tasks[ti];
        const Segment& s = segs[task.seg];
        std::vector<int64_t> rows;
        for (int64_t i = task.r0; i < task.r1; ++i)
          if (!trimmed || pass.read_mask[sz(s.offset + i)]) rows.push_back(i);
        if (rows.empty()) return;
        AttentionBlock(pass, a, s, layer_in(s, layer), task.g, std::move(rows)).run();
      },
      pass.threads);
}

// The extended state's keys/values: the blocks of the state continued (shared), then this
// segment's own.
void save_keys_values(const LayerPass& pass, int64_t layer, const Segment& s,
                      const AttentionArrays& a, LayerState& st) {
  const int64_t kv_w = kv_floats_per_token(pass.c);
  auto block = std::make_shared<KvBlock>();
  block->k.assign(a.k + s.offset * kv_w, a.k + (s.offset + s.len) * kv_w);
  block->v.assign(a.v + s.offset * kv_w, a.v + (s.offset + s.len) * kv_w);
  st.kv = layer_in(s, layer).kv;
  st.kv.push_back(std::move(block));
}

}  // namespace

void run_attention(LayerPass& pass, const AttentionWeights& w, int64_t layer,
                   const std::vector<Segment>& segs, bool trimmed) {
  Workspace& ws = pass.ws;
  const AttentionArrays a{ws.big1.data(), ws.qkv.data(), ws.aux2.data(), ws.big2.data(),
                          ws.aux1.data()};
  const int64_t h = pass.c.hidden, out_w = pass.c.heads * pass.c.head_dim;
  const bool any_query = !trimmed || !pass.read_rows.empty();
  if (any_query) pass.project(ws.xn.data(), h, w.q, a.qg);
  pass.project(ws.xn.data(), h, w.k, a.k);
  pass.project(ws.xn.data(), h, w.v, a.v);
  norm_and_rope(pass, w, a, any_query);
  for (const std::vector<size_t>& wave : pass.waves) {
    run_tasks(pass, a, layer, segs, wave, trimmed);
    for (size_t i : wave)
      if (pass.building[i]) save_keys_values(pass, layer, segs[i], a, *pass.building[i]);
  }
  if (!trimmed) {
    pass.project(a.out, out_w, w.o, ws.mix.data());
    return;
  }
  pass.keep_read_rows(a.out, out_w);
  if (pass.read_rows.empty()) return;
  const int64_t all_rows = pass.rows;
  pass.rows = static_cast<int64_t>(pass.read_rows.size());  // the projection's rows
  pass.project(a.out, out_w, w.o, ws.mix.data());
  pass.rows = all_rows;
}

size_t attention_scratch_bytes_per_key(const ModelConfig& c, size_t threads) {
  const auto pairs = static_cast<size_t>(kAttentionQueryRows * (c.heads / c.kv_heads));
  return threads * pairs * sizeof(float);
}

}  // namespace kev
