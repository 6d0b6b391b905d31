// The small JSON inputs of an export, parsed strictly (after verification) into what the
// exporter needs. Every refusal is Error(kBadInput) or Error(kUnsupported) naming the file and
// field.
//
// BaseTextConfig    config.json's text settings (text_config, or top level for text-only
//                   configs): hidden size, layer count, per-layer attention kind (by the
//                   runtime's own rule, formats/qwen_config.h), and the
//                   sizes that fix every LoRA target's base shape (all required, > 0;
//                   head_dim defaults to hidden / heads as in the model config).
// LoraConfig        adapter_config.json: PEFT LoRA only; DoRA, rsLoRA, fan_in_fan_out, biases,
//                   modules_to_save, per-module rank/alpha patterns and layer subsets refused.
// BaseIndex         model.safetensors.index.json: tensor -> shard.
// Delimiters        the five Kev delimiter ids, read from tokenizer.json's added_tokens.
#pragma once
#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "kev/formats/qwen_config.h"
#include "kev/text/delimiters.h"

namespace kev {

// The base's dimensions (read as the runtime reads them: formats/qwen_config.h) and its gate.
struct BaseTextConfig : QwenTextDims {
  bool attn_output_gate = true;  // q_proj holds query and gate rows (absent means true)

  bool operator==(const BaseTextConfig&) const = default;
};
BaseTextConfig parse_base_text_config(std::string_view json, const std::string& name);

struct LoraConfig {
  int64_t rank = 0;
  double alpha = 0;
  std::vector<std::string> target_modules;  // as listed (order kept)
};
LoraConfig parse_lora_config(std::string_view json, const std::string& name);

struct BaseIndex {
  std::map<std::string, std::string> weight_map;  // tensor -> shard file name
  std::vector<std::string> shards;                // sorted, unique
};
BaseIndex parse_base_index(std::string_view json, const std::string& name);

// Each of kDelimiterTokens by content (an id in [0, 2^31), the same id wherever it appears).
Delimiters parse_delimiters(std::string_view tokenizer_json, const std::string& name);

}  // namespace kev
