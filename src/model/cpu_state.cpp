// The CPU backend's states (cpu_state.h): their buffers, bookkeeping and footprint.
#include "model/cpu_state.h"

#include <bit>
#include <cstring>

#include "kev/core/error.h"

namespace kev {

int64_t kv_floats_per_token(const ModelConfig& c) {
  return c.kv_heads * c.head_dim;
}
int64_t conv_history_floats(const ModelConfig& c) {
  return (c.conv_kernel - 1) * c.conv_dim();
}
int64_t recurrent_state_floats(const ModelConfig& c) {
  return c.linear_value_heads * c.linear_key_dim * c.linear_value_dim;
}

StateFootprint cpu_state_footprint(const ModelConfig& c) {
  size_t attention = 0, gdn = 0;
  for (bool full : c.full_attention) (full ? attention : gdn) += 1;
  StateFootprint f;
  f.per_token = 2 * static_cast<size_t>(kv_floats_per_token(c)) * sizeof(float) * attention;
  f.fixed =
      static_cast<size_t>(conv_history_floats(c) + recurrent_state_floats(c)) * sizeof(float) * gdn;
  return f;
}

std::vector<StateBuffer> CpuState::buffers() const {
  std::vector<StateBuffer> out;
  for (const LayerState& l : layers) {
    for (const auto& b : l.kv)
      out.push_back({b.get(), sizeof(KvBlock) + 2 * sizeof(void*) +
                                  (b->k.capacity() + b->v.capacity()) * sizeof(float)});
    if (!l.conv.empty()) out.push_back({l.conv.data(), l.conv.capacity() * sizeof(float)});
    if (!l.s.empty()) out.push_back({l.s.data(), l.s.capacity() * sizeof(float)});
  }
  return out;
}

size_t CpuState::bookkeeping_bytes() const {
  size_t bytes = sizeof(CpuState) + layers.capacity() * sizeof(LayerState);
  for (const LayerState& l : layers) bytes += l.kv.capacity() * sizeof(l.kv[0]);
  return bytes;
}

std::shared_ptr<const CpuState> empty_cpu_state(const ModelConfig& c) {
  return std::make_shared<const CpuState>(static_cast<size_t>(c.layers));
}

void check_cpu_state(const ModelConfig& c, const PrefixState& s) {
  const auto* state = dynamic_cast<const CpuState*>(s.data.get());
  if (state == nullptr)
    fail(ErrorKind::kInternal, "the prefix state is not the CPU backend's ({})",
         s.data ? "another backend made it" : "it holds nothing");
  if (static_cast<int64_t>(state->layers.size()) != c.layers)
    fail(ErrorKind::kInternal, "prefix state has {} layers, model has {}", state->layers.size(),
         c.layers);
}

namespace {

static_assert(std::endian::native == std::endian::little, "kCpuStateLayout is little-endian");
constexpr uint32_t kAttentionTag = 1, kGdnTag = 2;

template <class T>
void put(const StateSink& out, T v) {
  out(&v, sizeof v);
}
template <class T>
T take(StateSource& in) {
  T v{};
  in.read(&v, sizeof v);
  return v;
}
// Reads `n` floats into `into` (resized), after checking that the stream holds them.
template <class Vec>
void take_floats(StateSource& in, Vec& into, uint64_t n, const char* what, int64_t layer) {
  if (n > in.remaining() / sizeof(float))
    fail(ErrorKind::kBadInput, "saved state: layer {}'s {} ({} floats) runs past its end", layer,
         what, n);
  into.resize(static_cast<size_t>(n));
  in.read(into.data(), into.size() * sizeof(float));
}

}  // namespace

void write_cpu_state(const ModelConfig& c, const PrefixState& s, const StateSink& out) {
  check_cpu_state(c, s);
  const CpuState& st = cpu_state(s);
  const auto kv_w = static_cast<size_t>(kv_floats_per_token(c));
  for (int64_t i = 0; i < c.layers; ++i) {
    const LayerState& l = st.layers[static_cast<size_t>(i)];
    if (c.full_attention[static_cast<size_t>(i)]) {
      put<uint32_t>(out, kAttentionTag);
      put<uint64_t>(out, l.kv.size());
      int64_t rows_total = 0;
      for (const auto& b : l.kv) {
        const size_t rows = b->k.size() / kv_w;
        put<uint64_t>(out, rows);
        out(b->k.data(), rows * kv_w * sizeof(float));
        out(b->v.data(), rows * kv_w * sizeof(float));
        rows_total += static_cast<int64_t>(rows);
      }
      if (rows_total != s.length)
        fail(ErrorKind::kInternal, "layer {} holds {} positions of a {}-token state", i, rows_total,
             s.length);
    } else {
      if (static_cast<int64_t>(l.conv.size()) != conv_history_floats(c) ||
          static_cast<int64_t>(l.s.size()) != recurrent_state_floats(c))
        fail(ErrorKind::kInternal, "GDN layer {} of a {}-token state is not complete", i, s.length);
      put<uint32_t>(out, kGdnTag);
      out(l.conv.data(), l.conv.size() * sizeof(float));
      out(l.s.data(), l.s.size() * sizeof(float));
    }
  }
}

std::shared_ptr<const CpuState> read_cpu_state(const ModelConfig& c, int64_t length,
                                               StateSource& in) {
  auto st = std::make_shared<CpuState>(static_cast<size_t>(c.layers));
  const auto kv_w = static_cast<uint64_t>(kv_floats_per_token(c));
  for (int64_t i = 0; i < c.layers; ++i) {
    LayerState& l = st->layers[static_cast<size_t>(i)];
    const bool attention = c.full_attention[static_cast<size_t>(i)];
    const auto tag = take<uint32_t>(in);
    if (tag != (attention ? kAttentionTag : kGdnTag))
      fail(ErrorKind::kBadInput, "saved state: layer {} is tagged {}, the model's is {}", i, tag,
           attention ? "attention (1)" : "GDN (2)");
    if (!attention) {
      take_floats(in, l.conv, static_cast<uint64_t>(conv_history_floats(c)), "conv history", i);
      take_floats(in, l.s, static_cast<uint64_t>(recurrent_state_floats(c)), "recurrent state", i);
      continue;
    }
    const auto blocks = take<uint64_t>(in);
    // Each block holds at least one row: its count, its keys and its values.
    const uint64_t least_block_bytes = sizeof(uint64_t) + 2 * kv_w * sizeof(float);
    if (blocks < 1 || blocks > static_cast<uint64_t>(length) ||
        blocks > in.remaining() / least_block_bytes)
      fail(ErrorKind::kBadInput, "saved state: layer {} has {} blocks for {} tokens", i, blocks,
           length);
    uint64_t rows_total = 0;
    l.kv.reserve(static_cast<size_t>(blocks));
    for (uint64_t b = 0; b < blocks; ++b) {
      const auto rows = take<uint64_t>(in);
      if (rows < 1 || rows > static_cast<uint64_t>(length) - rows_total)
        fail(ErrorKind::kBadInput, "saved state: layer {} block {} of {} rows overruns {} tokens",
             i, b, rows, length);
      rows_total += rows;
      auto block = std::make_shared<KvBlock>();
      take_floats(in, block->k, rows * kv_w, "keys", i);
      take_floats(in, block->v, rows * kv_w, "values", i);
      l.kv.push_back(std::move(block));
    }
    if (rows_total != static_cast<uint64_t>(length))
      fail(ErrorKind::kBadInput, "saved state: layer {} holds {} positions of {} tokens", i,
           rows_total, length);
  }
  return st;
}

}  // namespace kev
