// Rules of a Qwen3.5 text config (config.json, or its text_config) that the runtime
// (model/config.h) and the exporter (export/configs.h) both apply, so export never refuses what
// the runtime runs, nor the reverse. Errors name `where` and the field.
#pragma once
#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace kev {

// Each layer's attention kind (true = full attention, false = linear / Gated DeltaNet), as
// transformers' Qwen3.5 text config derives it: "layer_types" when present (a list of exactly
// `layers` entries, each "full_attention" or "linear_attention"; Error kBadInput for a wrong
// shape, kUnsupported for another kind), else full attention at every full_attention_interval-th
// layer, (l + 1) % interval == 0 (then the interval is required: a positive integer, kBadInput).
std::vector<bool> qwen_full_attention_layers(const nlohmann::json& text_config, int64_t layers,
                                             const std::string& where);

}  // namespace kev
