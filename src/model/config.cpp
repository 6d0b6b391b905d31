#include "kev/model/config.h"

#include <nlohmann/json.hpp>

#include <cmath>

#include "kev/core/error.h"
#include "kev/core/file.h"
#include "kev/core/json_strict.h"
#include "kev/formats/qwen_config.h"

namespace kev {
namespace {

using Json = nlohmann::json;

double get_number(const Json& j, const char* key, const std::string& where) {
  auto it = j.find(key);
  if (it == j.end() || !it->is_number())
    fail(ErrorKind::kBadInput, "{}: field '{}' is missing or not a number", where, key);
  return it->get<double>();
}

// RoPE settings live in `rope_parameters` (newer configs) or directly in text_config.
void parse_rope(const Json& tc, ModelConfig& c, const std::string& where) {
  const Json* rp = &tc;
  auto it = tc.find("rope_parameters");
  if (it != tc.end() && it->is_object()) rp = &*it;
  auto scaling = tc.find("rope_scaling");
  if (rp == &tc && scaling != tc.end() && scaling->is_object()) rp = &*scaling;

  auto type = rp->find("rope_type");
  if (type == rp->end()) type = rp->find("type");
  if (type != rp->end() && !(type->is_string() && *type == "default"))
    fail(ErrorKind::kUnsupported, "{}: rope_type {} is not supported (only \"default\")", where,
         shown_json(*type));
  if (rp->contains("rope_theta"))
    c.rope_theta = get_number(*rp, "rope_theta", where);
  else
    c.rope_theta = get_number(tc, "rope_theta", where);
  if (!(c.rope_theta > 1.0))
    fail(ErrorKind::kBadInput, "{}: rope_theta must be > 1, got {}", where, c.rope_theta);
  double factor = 1.0;
  if (rp->contains("partial_rotary_factor"))
    factor = get_number(*rp, "partial_rotary_factor", where);
  else if (tc.contains("partial_rotary_factor"))
    factor = get_number(tc, "partial_rotary_factor", where);
  // Upstream takes int(head_dim * factor); we require it to be exact and even so the half-split
  // rotation pairs (d, d + rot/2) are well defined.
  double rot = static_cast<double>(c.head_dim) * factor;
  if (!(factor > 0.0 && factor <= 1.0) || rot != std::floor(rot) ||
      static_cast<int64_t>(rot) % 2 != 0)
    fail(ErrorKind::kUnsupported,
         "{}: partial_rotary_factor {} gives {} rotary dims of head_dim {}; need an even whole "
         "number",
         where, factor, rot, c.head_dim);
  c.rotary_dim = static_cast<int64_t>(rot);
  // Multimodal RoPE: upstream overwrites frequency slots of the temporal stream with the height
  // and width streams per mrope_section. For text all three streams carry the same position, so
  // every section layout reduces to plain RoPE; we only check the field is well formed.
  auto sec = rp->find("mrope_section");
  if (sec != rp->end() && !sec->is_null()) {
    if (!sec->is_array()) fail(ErrorKind::kBadInput, "{}: mrope_section must be an array", where);
    for (const auto& s : *sec)
      if (!s.is_number_integer() || s.get<int64_t>() < 0)
        fail(ErrorKind::kBadInput, "{}: mrope_section entries must be non-negative integers",
             where);
  }
}

}  // namespace

ModelConfig ModelConfig::parse(const std::string& json_text, const std::string& where) {
  Json root;
  try {
    root = Json::parse(json_text);
  } catch (const Json::exception& e) {
    fail(ErrorKind::kBadInput, "{}: not valid JSON ({})", where, e.what());
  }
  if (!root.is_object()) fail(ErrorKind::kBadInput, "{}: expected a JSON object", where);
  const Json& tc = qwen_text_config(root, where);
  if (auto mt = tc.find("model_type"); mt != tc.end()) {
    if (!mt->is_string() || (*mt != "qwen3_5_text" && *mt != "qwen3_5"))
      fail(ErrorKind::kUnsupported, "{}: model_type {} is not supported (expected qwen3_5_text)",
           where, shown_json(*mt));
  }
  ModelConfig c;
  read_qwen_text_dims(tc, where, c);
  c.vocab = qwen_positive_int(tc, "vocab_size", where);
  c.conv_kernel = qwen_positive_int(tc, "linear_conv_kernel_dim", where);
  c.rms_eps = get_number(tc, "rms_norm_eps", where);
  if (!(c.rms_eps > 0 && c.rms_eps < 1))
    fail(ErrorKind::kBadInput, "{}: rms_norm_eps must be in (0, 1), got {}", where, c.rms_eps);
  if (c.heads % c.kv_heads != 0)
    fail(ErrorKind::kBadInput,
         "{}: num_attention_heads {} is not a multiple of num_key_value_heads {}", where, c.heads,
         c.kv_heads);
  if (c.linear_value_heads % c.linear_key_heads != 0)
    fail(ErrorKind::kBadInput,
         "{}: linear_num_value_heads {} is not a multiple of linear_num_key_heads {}", where,
         c.linear_value_heads, c.linear_key_heads);
  if (c.conv_kernel > 64)
    fail(ErrorKind::kUnsupported, "{}: linear_conv_kernel_dim {} is too large", where,
         c.conv_kernel);
  if (auto g = tc.find("attn_output_gate"); g != tc.end() && !(g->is_boolean() && g->get<bool>()))
    fail(ErrorKind::kUnsupported, "{}: attn_output_gate must be true (gated attention)", where);
  if (auto b = tc.find("attention_bias"); b != tc.end() && !(b->is_boolean() && !b->get<bool>()))
    fail(ErrorKind::kUnsupported, "{}: attention_bias true is not supported", where);
  if (auto a = tc.find("hidden_act"); a != tc.end() && !(a->is_string() && *a == "silu"))
    fail(ErrorKind::kUnsupported, "{}: hidden_act {} is not supported (only silu)", where,
         shown_json(*a));
  if (auto n = tc.find("num_experts");
      n != tc.end() && n->is_number_integer() && n->get<int64_t>() > 0)
    fail(ErrorKind::kUnsupported, "{}: mixture-of-experts models are not supported", where);
  parse_rope(tc, c, where);
  return c;
}

ModelConfig ModelConfig::load(const std::string& model_dir) {
  std::string path = model_dir + "/config.json";
  if (!path_exists(path))
    fail(ErrorKind::kBadInput, "{}: missing; a model directory needs config.json", path);
  return parse(read_file(path), path);
}

}  // namespace kev
