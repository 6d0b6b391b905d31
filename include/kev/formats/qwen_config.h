// Rules of a Qwen3.5 text config (config.json, or its text_config) that the runtime
// (model/config.h) and the exporter (export/configs.h) both apply, so export never refuses what
// the runtime runs, nor the reverse. Errors name `where` and the field.
#pragma once
#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <vector>

namespace kev {

// The dimensions both readers take from a Qwen3.5 text config, and each layer's kind.
struct QwenTextDims {
  int64_t hidden = 0, intermediate = 0, layers = 0;
  int64_t heads = 0, kv_heads = 0, head_dim = 0;         // full (gated) attention
  int64_t linear_key_heads = 0, linear_value_heads = 0;  // Gated DeltaNet (linear attention)
  int64_t linear_key_dim = 0, linear_value_dim = 0;
  std::vector<bool> full_attention;  // per layer: true = full attention, false = GDN

  bool operator==(const QwenTextDims&) const = default;
};

// The published text configs the Kev family is built on, by size: "0.8b", "4b", "9b"
// (Qwen3.5-*-Base) and "27b" (Qwen3.8-27B), as their config.json files give them (full attention
// on every fourth layer, l % 4 == 3). nullptr for another name.
const QwenTextDims* qwen_published_dims(std::string_view size);

// config.json's text part: its "text_config" object where it has one (kBadInput if that is not
// an object), else the root itself.
const nlohmann::json& qwen_text_config(const nlohmann::json& root, const std::string& where);

// An integer field in [1, 2^31]: else kBadInput naming `where` and the field.
int64_t qwen_positive_int(const nlohmann::json& obj, const char* key, const std::string& where);

// Reads QwenTextDims from a text config: each dimension by qwen_positive_int (head_dim defaults
// to hidden_size / num_attention_heads, as transformers does), the layer kinds by
// qwen_full_attention_layers.
void read_qwen_text_dims(const nlohmann::json& text_config, const std::string& where,
                         QwenTextDims& dims);

// Each layer's attention kind (true = full attention, false = linear / Gated DeltaNet), as
// transformers' Qwen3.5 text config derives it: "layer_types" when present (a list of exactly
// `layers` entries, each "full_attention" or "linear_attention"; Error kBadInput for a wrong
// shape, kUnsupported for another kind), else full attention at every full_attention_interval-th
// layer, (l + 1) % interval == 0 (then the interval is required: a positive integer, kBadInput).
std::vector<bool> qwen_full_attention_layers(const nlohmann::json& text_config, int64_t layers,
                                             const std::string& where);

}  // namespace kev
