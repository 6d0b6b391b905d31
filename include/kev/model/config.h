// Qwen3.5 text-model configuration, read from a model directory's config.json.
//
// Contract: ModelConfig::parse reads `text_config` (or, for a text-only config, the top level)
// and returns validated dimensions, or throws Error naming config.json and the field:
// kBadInput for missing/ill-typed/inconsistent fields, kUnsupported for valid settings this
// engine does not implement (non-default RoPE, attention without output gate, odd rotary dims,
// attention bias, an activation other than SiLU, mixture-of-experts). Any mrope_section reduces
// to plain RoPE for text (all three position streams are equal). Nothing here touches weights.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "kev/formats/qwen_config.h"

namespace kev {

struct ModelConfig : QwenTextDims {
  int64_t vocab = 0;
  int64_t rotary_dim = 0;  // leading dims of each head RoPE rotates
  double rope_theta = 0;
  int64_t conv_kernel = 0;  // the GDN short convolution's width
  double rms_eps = 0;

  int64_t conv_dim() const {
    return 2 * linear_key_heads * linear_key_dim + linear_value_heads * linear_value_dim;
  }
  int64_t lin_v_total() const { return linear_value_heads * linear_value_dim; }

  bool operator==(const ModelConfig&) const = default;

  static ModelConfig parse(const std::string& json_text, const std::string& name_for_errors);
  static ModelConfig load(const std::string& model_dir);  // <dir>/config.json
};

}  // namespace kev
