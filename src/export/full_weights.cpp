#include "kev/export/full_weights.h"

#include <dirent.h>

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cstring>
#include <set>

#include "kev/core/error.h"
#include "kev/core/file.h"
#include "kev/core/json_strict.h"
#include "kev/core/sha256.h"

namespace kev {
namespace {

using Json = nlohmann::json;

// Prefixes the multimodal checkpoints and other exporters put before the text model's names;
// a full-weight checkpoint is save_pretrained of the text model itself and carries none.
constexpr const char* kKnownPrefixes[] = {"model.language_model.", "language_model.model.",
                                          "model.", "language_model."};

int64_t positive(const Json& root, const char* key, const std::string& name) {
  auto it = root.find(key);
  if (it == root.end() || !it->is_number_integer() || it->get<int64_t>() <= 0)
    fail(ErrorKind::kBadInput, "{}: \"{}\" must be a positive integer", name, key);
  return it->get<int64_t>();
}

bool is_model_shard_name(const std::string& n) {
  return n.starts_with("model") && n.ends_with(".safetensors");
}

}  // namespace

std::string checkpoint_form_from_files(const std::string& dir) {
  if (path_exists(dir + "/adapter_config.json")) return "lora";
  if (!path_exists(dir + "/config.json")) return "";
  DIR* d = ::opendir(dir.c_str());
  if (!d) return "";
  bool shards = false;
  while (const dirent* e = ::readdir(d))
    if (is_model_shard_name(e->d_name)) shards = true;
  ::closedir(d);
  return shards ? "full" : "";
}

void refuse_form_mismatch(const std::string& dir, const std::string& head_says,
                          const std::string& files_hold) {
  const char* holds = files_hold == "lora"   ? "an adapter (adapter_config.json)"
                      : files_hold == "full" ? "backbone weights (config.json and shards, no "
                                               "adapter)"
                                             : "neither an adapter nor backbone weights";
  fail(ErrorKind::kBadInput,
       "{}: head.pt says weights=\"{}\" but the checkpoint holds {}; they are not one checkpoint",
       dir, head_says, holds);
}

FullConfig parse_full_config(std::string_view text, const std::string& name) {
  Json root = Json::parse(text, nullptr, false);
  if (root.is_discarded() || !root.is_object())
    fail(ErrorKind::kBadInput, "{} is not a JSON object", name);
  auto mt = root.find("model_type");
  if (root.contains("text_config") || mt == root.end() || *mt != kFullModelType)
    fail(ErrorKind::kUnsupported,
         "{}: a full-weight checkpoint is the text model's own config (top-level model_type "
         "\"{}\", no text_config); this one has model_type {}{}",
         name, kFullModelType, mt == root.end() ? std::string("missing") : shown_json(*mt),
         root.contains("text_config") ? " and a text_config" : "");
  // save_pretrained writes "dtype" (older transformers "torch_dtype"); upstream reads the first
  // present and requires the dtype head.pt names, which for kev is bfloat16.
  for (const char* key : {"dtype", "torch_dtype"}) {
    auto it = root.find(key);
    if (it == root.end() || it->is_null()) continue;
    if (*it != "bfloat16")
      fail(ErrorKind::kUnsupported,
           "{}: \"{}\" is {}; kev runs full-weight checkpoints stored in bfloat16 only (head.pt's "
           "weights_dtype \"bf16\")",
           name, key, shown_json(*it));
    break;
  }
  FullConfig c;
  c.text = parse_base_text_config(text, name);
  c.vocab = positive(root, "vocab_size", name);
  c.conv_kernel = positive(root, "linear_conv_kernel_dim", name);
  return c;
}

std::map<std::string, std::vector<int64_t>> full_expected_tensors(const FullConfig& fc) {
  const BaseTextConfig& c = fc.text;
  const int64_t h = c.hidden, hd = c.head_dim;
  const int64_t key = c.linear_key_heads * c.linear_key_dim,
                value = c.linear_value_heads * c.linear_value_dim;
  std::map<std::string, std::vector<int64_t>> t;
  t["embed_tokens.weight"] = {fc.vocab, h};
  t["norm.weight"] = {h};
  for (int64_t l = 0; l < c.layers; ++l) {
    const std::string p = "layers." + std::to_string(l) + ".";
    t[p + "input_layernorm.weight"] = {h};
    t[p + "post_attention_layernorm.weight"] = {h};
    t[p + "mlp.gate_proj.weight"] = {c.intermediate, h};
    t[p + "mlp.up_proj.weight"] = {c.intermediate, h};
    t[p + "mlp.down_proj.weight"] = {h, c.intermediate};
    if (c.full_attention[static_cast<size_t>(l)]) {
      const std::string a = p + "self_attn.";
      t[a + "q_proj.weight"] = {c.heads * hd * (c.attn_output_gate ? 2 : 1), h};
      t[a + "k_proj.weight"] = {c.kv_heads * hd, h};
      t[a + "v_proj.weight"] = {c.kv_heads * hd, h};
      t[a + "o_proj.weight"] = {h, c.heads * hd};
      t[a + "q_norm.weight"] = {hd};
      t[a + "k_norm.weight"] = {hd};
    } else {
      const std::string g = p + "linear_attn.";
      t[g + "in_proj_qkv.weight"] = {2 * key + value, h};
      t[g + "in_proj_z.weight"] = {value, h};
      t[g + "in_proj_a.weight"] = {c.linear_value_heads, h};
      t[g + "in_proj_b.weight"] = {c.linear_value_heads, h};
      t[g + "out_proj.weight"] = {h, value};
      t[g + "conv1d.weight"] = {2 * key + value, 1, fc.conv_kernel};
      t[g + "A_log"] = {c.linear_value_heads};
      t[g + "dt_bias"] = {c.linear_value_heads};
      t[g + "norm.weight"] = {c.linear_value_dim};
    }
  }
  return t;
}

void check_full_tensors(const FullConfig& config, const std::vector<const SafetensorsFile*>& shards,
                        const std::vector<std::string>& shard_names, const std::string& dir) {
  const auto expected = full_expected_tensors(config);
  std::map<std::string, std::string> seen;  // tensor -> shard
  for (size_t s = 0; s < shards.size(); ++s) {
    const std::string& shard = shard_names[s];
    for (const TensorInfo& t : shards[s]->tensors()) {
      auto [where, fresh] = seen.emplace(t.name, shard);
      if (!fresh)
        fail(ErrorKind::kBadInput, "{}: tensor {} is in more than one shard ({} and {})", dir,
             t.name, where->second, shard);
      auto want = expected.find(t.name);
      if (want == expected.end()) {
        for (const char* prefix : kKnownPrefixes)
          if (t.name.starts_with(prefix) && expected.count(t.name.substr(std::strlen(prefix))))
            fail(ErrorKind::kBadInput,
                 "{}/{}: tensor {} carries the prefix \"{}\"; a full-weight checkpoint names the "
                 "text model's tensors without prefix ({}), as save_pretrained of the text model "
                 "writes them",
                 dir, shard, t.name, prefix, t.name.substr(std::strlen(prefix)));
        fail(ErrorKind::kBadInput,
             "{}/{}: tensor {} is not part of the Qwen3.5 text backbone config.json describes "
             "(a full-weight checkpoint holds exactly embed_tokens, the {} layers and norm; no "
             "lm_head, vision tower or MTP)",
             dir, shard, t.name, config.text.layers);
      }
      if (t.shape != want->second) {
        const bool conv = t.name.ends_with("conv1d.weight");
        fail(ErrorKind::kBadInput, "{}/{}: tensor {} has shape {}; config.json implies {}{}", dir,
             shard, t.name, shape_string(t.shape), shape_string(want->second),
             conv ? " (transformers' depthwise conv kernel layout [channels, 1, width])" : "");
      }
      if (t.dtype != DType::kBF16)
        fail(ErrorKind::kUnsupported,
             "{}/{}: tensor {} is {}; every tensor of a full-weight checkpoint must be in "
             "config.json's dtype, bfloat16 (BF16), and kev converts nothing",
             dir, shard, t.name, dtype_name(t.dtype));
    }
  }
  size_t missing = 0;
  std::string first;
  for (const auto& [name, shape] : expected)
    if (!seen.count(name) && missing++ == 0) first = name;
  if (missing)
    fail(ErrorKind::kBadInput,
         "{}: the shards lack {} tensor{} config.json requires (first: {} {})", dir, missing,
         missing == 1 ? "" : "s", first, shape_string(expected.at(first)));
}

std::string full_weights_sha256(const std::map<std::string, std::string>& shard_digests) {
  std::string lines;
  for (const auto& [name, digest] : shard_digests) lines += name + ":" + digest + "\n";
  return sha256_hex(lines);
}

}  // namespace kev
