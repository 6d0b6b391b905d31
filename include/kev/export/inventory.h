// The LoRA inventory: which base weights an adapter must change, derived from the pinned
// config (layer_types) and adapter_config (target_modules), checked against the adapter file.
//
// Module families (Qwen3.5): mlp.{gate,up,down}_proj on every layer; self_attn.{q,k,v,o}_proj on
// full-attention layers; linear_attn.{in_proj_qkv,in_proj_z,in_proj_a,in_proj_b,out_proj} on
// linear-attention (GDN) layers. Adapter tensor names are
// "base_model.model.layers.N.<family>.<module>.lora_{A,B}.weight"; the base weight is
// "model.language_model.layers.N.<family>.<module>.weight".
//
// check_adapter refuses (Error kBadInput, listing what is wrong): a missing lora_A/lora_B, an
// adapter tensor that is not an expected one (extra, unknown, a bias, a DoRA magnitude), a
// count that differs from the recipe's (the family member's counts: kev/export/family.h), a base
// weight whose shape is not the [out, in] that config.json implies for its projection (so every
// dimension is > 0), shapes other than A [r, in] / B [out, r] for a BF16 base weight [out, in], and
// adapter dtypes other than F32.
#pragma once
#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "kev/export/configs.h"
#include "kev/formats/safetensors.h"

namespace kev {

struct LoraTarget {
  std::string base_name;  // model.language_model.layers.N.mlp.gate_proj.weight
  std::string a_name, b_name;
  std::string family;  // "mlp", "self_attn", "linear_attn"
  int64_t layer = 0;
  std::vector<int64_t> base_shape;  // [out, in] that config.json implies
};

// Refuses (kUnsupported) a target module name outside the three families, and (kBadInput) config
// sizes whose products overflow.
std::vector<LoraTarget> expected_targets(const BaseTextConfig& config, const LoraConfig& lora);

// Shape lookups for base weights: returns nullptr when the base has no such tensor.
using BaseTensorLookup = std::function<const TensorInfo*(const std::string& name)>;

void check_adapter(const std::vector<LoraTarget>& targets, const SafetensorsView& adapter,
                   const BaseTensorLookup& base, int64_t rank, const std::string& adapter_name);

}  // namespace kev
