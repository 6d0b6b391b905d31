// The CPU backend's prefix state (kev/model/model.h: PrefixState holds it as a BackendState):
// per layer, the attention keys/values in shared immutable blocks and each GDN layer's conv and
// recurrent state, in host memory. Made by the layer units (attention.cpp, gdn.cpp), sized by
// the functions below (which also give the backend's StateFootprint, so memory admission counts
// what is allocated), read by the layers and the tests; the Model and the prefix cache see only
// BackendState. Immutable once published.
#pragma once
#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include "kev/core/aligned.h"
#include "kev/model/config.h"
#include "kev/model/model.h"

namespace kev {

// Keys and values of consecutive positions, as one segment of a pass wrote them: k, v [rows,
// kv_heads * head_dim] (after k_norm and RoPE). Immutable once made.
struct KvBlock {
  AlignedVector<float> k, v;  // 64-byte aligned: the attention kernels stream their rows
};

// One layer's state after a prefix. Attention layers: kv, the keys/values of every position so
// far in blocks (position order); a state that continues another shares that one's blocks and
// adds one of its own, so saved points of one conversation hold each position's keys/values
// once. GDN layers: conv [conv_kernel - 1, conv_dim] last pre-conv inputs (oldest first, zeros
// before the start), s [linear_value_heads, linear_key_dim, linear_value_dim] recurrent state
// (fixed-size).
struct LayerState {
  std::vector<std::shared_ptr<const KvBlock>> kv;
  std::vector<float> conv, s;
};

// Floats a layer's state holds: an attention layer's keys (and as many values) per token; a GDN
// layer's conv history and recurrent state.
int64_t kv_floats_per_token(const ModelConfig& c);
int64_t conv_history_floats(const ModelConfig& c);
int64_t recurrent_state_floats(const ModelConfig& c);
// The footprint (model.h) of a CPU state from those.
StateFootprint cpu_state_footprint(const ModelConfig& c);

class CpuState final : public BackendState {
 public:
  explicit CpuState(size_t layers) : layers(layers) {}
  std::vector<StateBuffer> buffers() const override;
  size_t bookkeeping_bytes() const override;

  std::vector<LayerState> layers;
};

// The CPU states' byte layout (model.h write_state; state_bytes.h), in the backend's identity.
// Per layer, in order: a u32 tag (1 attention, 2 GDN); an attention layer then a u64 block
// count and per block a u64 row count, its keys then its values (rows * kv_floats_per_token
// floats each); a GDN layer its conv history then its recurrent state. Little-endian throughout
// (IEEE floats as they are in memory), so x86-64 and ARM64 write the same bytes.
inline constexpr const char* kCpuStateLayout = "f32le-blocks-1";
void write_cpu_state(const ModelConfig& c, const PrefixState& s, const StateSink& out);
// A state of `length` tokens from `in` (Error kBadInput for anything that does not fit `c`).
std::shared_ptr<const CpuState> read_cpu_state(const ModelConfig& c, int64_t length,
                                               StateSource& in);

// A CPU state for `c` before any token.
std::shared_ptr<const CpuState> empty_cpu_state(const ModelConfig& c);
// Error(kInternal) unless `s` is a CpuState of c.layers layers.
void check_cpu_state(const ModelConfig& c, const PrefixState& s);
// The CpuState of a state check_cpu_state accepted.
inline const CpuState& cpu_state(const PrefixState& s) {
  return static_cast<const CpuState&>(*s.data);
}

}  // namespace kev
