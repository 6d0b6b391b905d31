// The CPU backend's states (cpu_state.h): their buffers, bookkeeping and footprint.
#include "model/cpu_state.h"

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

}  // namespace kev
