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

namespace kev {

struct ModelConfig {
  int64_t hidden = 0, intermediate = 0, layers = 0, vocab = 0;
  // Full (gated) attention.
  int64_t heads = 0, kv_heads = 0, head_dim = 0, rotary_dim = 0;
  double rope_theta = 0;
  // Gated DeltaNet (linear attention).
  int64_t lin_k_heads = 0, lin_v_heads = 0, lin_k_dim = 0, lin_v_dim = 0, conv_kernel = 0;
  double rms_eps = 0;
  std::vector<bool> full_attention;  // per layer: true = full attention, false = GDN

  int64_t conv_dim() const { return 2 * lin_k_heads * lin_k_dim + lin_v_heads * lin_v_dim; }
  int64_t lin_v_total() const { return lin_v_heads * lin_v_dim; }

  static ModelConfig parse(const std::string& json_text, const std::string& name_for_errors);
  static ModelConfig load(const std::string& model_dir);  // <dir>/config.json
};

}  // namespace kev
