#include "kev/export/configs.h"

#include <nlohmann/json.hpp>

#include <cmath>
#include <cstdint>
#include <set>

#include "kev/core/error.h"
#include "kev/core/json_strict.h"
#include "kev/export/recipe.h"
#include "kev/formats/qwen_config.h"

namespace kev {
namespace {

using Json = nlohmann::json;

Json parse_object(std::string_view text, const std::string& name) {
  Json j = Json::parse(text, nullptr, false);
  if (j.is_discarded() || !j.is_object())
    fail(ErrorKind::kBadInput, "{} is not a JSON object", name);
  return j;
}

int64_t positive_int(const Json& obj, const char* key, const std::string& name) {
  auto it = obj.find(key);
  if (it == obj.end() || !it->is_number_integer() || it->get<int64_t>() <= 0)
    fail(ErrorKind::kBadInput, "{}: \"{}\" must be a positive integer", name, key);
  return it->get<int64_t>();
}

// A flag that must be absent, null or false.
void require_off(const Json& obj, const char* key, const char* what, const std::string& name) {
  auto it = obj.find(key);
  if (it == obj.end() || it->is_null() || (it->is_boolean() && !it->get<bool>())) return;
  fail(ErrorKind::kUnsupported, "{}: \"{}\" is {} ({}); only plain LoRA adapters can be merged",
       name, key, shown_json(*it), what);
}

// A collection that must be absent, null or empty.
void require_empty(const Json& obj, const char* key, const char* what, const std::string& name) {
  auto it = obj.find(key);
  if (it == obj.end() || it->is_null() || ((it->is_object() || it->is_array()) && it->empty()))
    return;
  fail(ErrorKind::kUnsupported, "{}: \"{}\" is {} ({}); only plain LoRA adapters can be merged",
       name, key, shown_json(*it), what);
}

// null, false, "", [] or {}: what PEFT writes for a feature left off.
bool is_off(const Json& v) {
  return v.is_null() || (v.is_boolean() && !v.get<bool>()) ||
         (v.is_string() && v.get<std::string>().empty()) ||
         ((v.is_array() || v.is_object()) && v.empty());
}

// adapter_config.json keys kev knows: the ones read or checked in parse_lora_config, and those
// that do not change a saved adapter's merge (provenance, training-only settings, settings of a
// feature whose switch is checked).
const std::set<std::string> kKnownAdapterKeys = {
    // read or checked
    "peft_type", "r", "lora_alpha", "target_modules", "use_dora", "use_rslora", "fan_in_fan_out",
    "modules_to_save", "rank_pattern", "alpha_pattern", "layers_to_transform", "layer_replication",
    "bias", "lora_bias", "use_qalora", "exclude_modules", "target_parameters",
    "trainable_token_indices", "alora_invocation_tokens", "megatron_config", "arrow_config",
    "init_lora_weights",
    // provenance and bookkeeping
    "base_model_name_or_path", "revision", "task_type", "inference_mode", "auto_mapping",
    "peft_version",
    // training-time only, or settings of a feature whose switch is checked above
    "lora_dropout", "loftq_config", "eva_config", "corda_config", "runtime_config",
    "layers_pattern", "megatron_core", "qalora_group_size", "ensure_weight_tying"};

// PEFT features whose merge is not W + (alpha / r) B A, refused by name: switches that must be
// off (false or absent), and settings that must be empty (absent, null, [] or {}).
struct RefusedFeature {
  const char* key;
  const char* what;
};
constexpr RefusedFeature kRefusedSwitches[] = {{"use_dora", "DoRA"},
                                               {"lora_bias", "a trained bias beside lora_B"},
                                               {"use_qalora", "QALoRA"},
                                               {"use_rslora", "rsLoRA scales by alpha/sqrt(r)"},
                                               {"fan_in_fan_out", "transposed weights"}};
constexpr RefusedFeature kRefusedSettings[] = {
    {"modules_to_save", "fully trained extra modules"},
    {"rank_pattern", "per-module ranks"},
    {"alpha_pattern", "per-module alphas"},
    {"layers_to_transform", "a layer subset"},
    {"layer_replication", "replicated layers"},
    {"exclude_modules", "modules left out of target_modules"},
    {"target_parameters", "LoRA on parameters rather than modules"},
    {"trainable_token_indices",
     "trained token embeddings that replace rows of the embedding matrix"},
    {"alora_invocation_tokens", "activated LoRA, applied only after its invocation tokens"},
    {"megatron_config", "Megatron parallel layers"},
    {"arrow_config", "routing among several adapters"}};

}  // namespace

BaseTextConfig parse_base_text_config(std::string_view text, const std::string& name) {
  const Json root = parse_object(text, name);
  const Json* tc = &qwen_text_config(root, name);
  BaseTextConfig c;
  read_qwen_text_dims(*tc, name, c);
  if (auto g = tc->find("attn_output_gate"); g != tc->end()) {
    if (!g->is_boolean())
      fail(ErrorKind::kBadInput, "{}: \"attn_output_gate\" must be true or false", name);
    c.attn_output_gate = g->get<bool>();
  }
  return c;
}

LoraConfig parse_lora_config(std::string_view text, const std::string& name) {
  Json j = parse_object(text, name);
  auto pt = j.find("peft_type");
  if (pt == j.end() || *pt != "LORA")
    fail(ErrorKind::kUnsupported, "{}: \"peft_type\" is {}; only \"LORA\" adapters can be merged",
         name, pt == j.end() ? std::string("missing") : shown_json(*pt));
  LoraConfig c;
  c.rank = positive_int(j, "r", name);
  auto alpha = j.find("lora_alpha");
  if (alpha == j.end() || !alpha->is_number() || !std::isfinite(alpha->get<double>()) ||
      alpha->get<double>() <= 0)
    fail(ErrorKind::kBadInput, "{}: \"lora_alpha\" must be a positive number", name);
  c.alpha = alpha->get<double>();
  for (const RefusedFeature& f : kRefusedSwitches) require_off(j, f.key, f.what, name);
  for (const RefusedFeature& f : kRefusedSettings) require_empty(j, f.key, f.what, name);
  if (auto init = j.find("init_lora_weights"); init != j.end() && !init->is_null()) {
    static const std::set<std::string> kPlain = {"gaussian", "eva", "orthogonal"};
    if (!init->is_boolean() && !(init->is_string() && kPlain.count(init->get<std::string>())))
      fail(ErrorKind::kUnsupported,
           "{}: \"init_lora_weights\" is {}; only adapters initialised without changing the base "
           "(true, false, \"gaussian\", \"eva\", \"orthogonal\") can be merged: a PiSSA, OLoRA, "
           "CorDA or LoftQ adapter not converted to plain LoRA when saved is relative to a "
           "modified base",
           name, shown_json(*init));
  }
  // Every other key PEFT writes is either provenance or the setting of a feature refused above.
  // A key kev does not know is accepted only at a value that means "off" (what PEFT writes for
  // a feature left at its default); anything else might change the merge and is refused.
  for (const auto& [key, v] : j.items()) {
    if (kKnownAdapterKeys.count(key) || is_off(v)) continue;
    fail(ErrorKind::kUnsupported,
         "{}: \"{}\" is {}, a PEFT setting kev does not know; kev refuses it rather than guess "
         "whether it changes the merge (only plain LoRA adapters can be merged)",
         name, key, shown_json(v));
  }
  if (auto b = j.find("bias"); b != j.end() && *b != "none")
    fail(ErrorKind::kUnsupported, "{}: \"bias\" is {}; only bias \"none\" adapters can be merged",
         name, shown_json(*b));
  auto tm = j.find("target_modules");
  if (tm == j.end() || !tm->is_array() || tm->empty())
    fail(ErrorKind::kUnsupported,
         "{}: \"target_modules\" must be a non-empty list of module names (a regex is not "
         "supported)",
         name);
  std::set<std::string> seen;
  for (const Json& m : *tm) {
    if (!m.is_string()) fail(ErrorKind::kBadInput, "{}: target_modules holds a non-string", name);
    if (!seen.insert(m.get<std::string>()).second)
      fail(ErrorKind::kBadInput, "{}: target_modules lists {} twice", name, shown_json(m));
    c.target_modules.push_back(m.get<std::string>());
  }
  return c;
}

BaseIndex parse_base_index(std::string_view text, const std::string& name) {
  Json j = parse_object(text, name);
  auto wm = j.find("weight_map");
  if (wm == j.end() || !wm->is_object() || wm->empty())
    fail(ErrorKind::kBadInput, "{}: \"weight_map\" must be a non-empty object", name);
  BaseIndex idx;
  std::set<std::string> shards;
  for (const auto& [tensor, shard] : wm->items()) {
    if (!shard.is_string() || !is_plain_file_name(shard.get<std::string>()) ||
        !shard.get<std::string>().ends_with(".safetensors"))
      fail(ErrorKind::kBadInput, "{}: tensor {} maps to {}, not a plain .safetensors file name",
           name, tensor, shown_json(shard));
    idx.weight_map[tensor] = shard.get<std::string>();
    shards.insert(shard.get<std::string>());
  }
  idx.shards.assign(shards.begin(), shards.end());
  return idx;
}

Delimiters parse_delimiters(std::string_view text, const std::string& name) {
  Json j = parse_object(text, name);
  auto added = j.find("added_tokens");
  if (added == j.end() || !added->is_array())
    fail(ErrorKind::kBadInput, "{}: \"added_tokens\" must be a list", name);
  auto find = [&](const char* content) -> int32_t {
    int64_t found = -1;
    for (const Json& t : *added) {
      if (!t.is_object() || t.value("content", Json()) != content) continue;
      auto id = t.find("id");
      if (id == t.end() || !id->is_number_integer() || id->get<int64_t>() < 0 ||
          id->get<int64_t>() > INT32_MAX)
        fail(ErrorKind::kBadInput, "{}: added token {} has no valid id", name, content);
      if (found >= 0 && found != id->get<int64_t>())
        fail(ErrorKind::kBadInput, "{}: added token {} appears with two ids", name, content);
      found = id->get<int64_t>();
    }
    if (found < 0)
      fail(ErrorKind::kBadInput, "{}: added_tokens has no {} (a Kev delimiter)", name, content);
    return static_cast<int32_t>(found);
  };
  Delimiters d;
  for (const DelimiterToken& t : kDelimiterTokens) d.*t.id = find(t.content);
  return d;
}

}  // namespace kev
