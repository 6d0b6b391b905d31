#include "kev/formats/qwen_config.h"

#include "kev/core/error.h"
#include "kev/core/json_strict.h"

namespace kev {

const nlohmann::json& qwen_text_config(const nlohmann::json& root, const std::string& where) {
  auto it = root.find("text_config");
  if (it == root.end()) return root;
  if (!it->is_object()) fail(ErrorKind::kBadInput, "{}: text_config must be an object", where);
  return *it;
}

int64_t qwen_positive_int(const nlohmann::json& obj, const char* key, const std::string& where) {
  auto it = obj.find(key);
  if (it == obj.end() || !it->is_number_integer())
    fail(ErrorKind::kBadInput, "{}: field '{}' is missing or not an integer", where, key);
  const int64_t v = it->get<int64_t>();
  if (v <= 0) fail(ErrorKind::kBadInput, "{}: field '{}' must be positive, got {}", where, key, v);
  if (v > (int64_t{1} << 31))
    fail(ErrorKind::kBadInput, "{}: field '{}' = {} is implausibly large", where, key, v);
  return v;
}

void read_qwen_text_dims(const nlohmann::json& tc, const std::string& where, QwenTextDims& d) {
  struct Field {
    const char* key;
    int64_t QwenTextDims::*value;
  };
  static constexpr Field kFields[] = {{"hidden_size", &QwenTextDims::hidden},
                                      {"intermediate_size", &QwenTextDims::intermediate},
                                      {"num_hidden_layers", &QwenTextDims::layers},
                                      {"num_attention_heads", &QwenTextDims::heads},
                                      {"num_key_value_heads", &QwenTextDims::kv_heads},
                                      {"linear_num_key_heads", &QwenTextDims::linear_key_heads},
                                      {"linear_num_value_heads", &QwenTextDims::linear_value_heads},
                                      {"linear_key_head_dim", &QwenTextDims::linear_key_dim},
                                      {"linear_value_head_dim", &QwenTextDims::linear_value_dim}};
  for (const Field& f : kFields) d.*f.value = qwen_positive_int(tc, f.key, where);
  d.head_dim =
      tc.contains("head_dim") ? qwen_positive_int(tc, "head_dim", where) : d.hidden / d.heads;
  d.full_attention = qwen_full_attention_layers(tc, d.layers, where);
}

std::vector<bool> qwen_full_attention_layers(const nlohmann::json& tc, int64_t layers,
                                             const std::string& where) {
  std::vector<bool> full;
  auto types = tc.find("layer_types");
  if (types == tc.end()) {
    auto it = tc.find("full_attention_interval");
    if (it == tc.end() || !it->is_number_integer() || it->get<int64_t>() <= 0)
      fail(ErrorKind::kBadInput,
           "{}: layer_types is missing and full_attention_interval is missing or not a positive "
           "integer",
           where);
    const int64_t interval = it->get<int64_t>();
    for (int64_t l = 0; l < layers; ++l) full.push_back((l + 1) % interval == 0);
    return full;
  }
  if (!types->is_array()) fail(ErrorKind::kBadInput, "{}: layer_types must be a list", where);
  if (static_cast<int64_t>(types->size()) != layers)
    fail(ErrorKind::kBadInput, "{}: layer_types has {} entries but num_hidden_layers is {}", where,
         types->size(), layers);
  for (size_t i = 0; i < types->size(); ++i) {
    const nlohmann::json& t = (*types)[i];
    if (t == "full_attention")
      full.push_back(true);
    else if (t == "linear_attention")
      full.push_back(false);
    else
      fail(ErrorKind::kUnsupported,
           "{}: layer_types[{}] is {}; expected \"full_attention\" or \"linear_attention\"", where,
           i, shown_json(t));
  }
  return full;
}

namespace {

// Full attention on every fourth layer (full_attention_interval 4 in these configs).
QwenTextDims every_fourth_full(QwenTextDims d) {
  for (int64_t l = 0; l < d.layers; ++l) d.full_attention.push_back(l % 4 == 3);
  return d;
}

}  // namespace

const QwenTextDims* qwen_published_dims(std::string_view size) {
  struct Published {
    const char* size;
    QwenTextDims dims;
  };
  // hidden, intermediate, layers, attention heads, key/value heads, head dim; GDN key heads,
  // value heads, key dim, value dim.
  static const Published kPublished[] = {
      {"0.8b", every_fourth_full({1024, 3584, 24, 8, 2, 256, 16, 16, 128, 128, {}})},
      {"4b", every_fourth_full({2560, 9216, 32, 16, 4, 256, 16, 32, 128, 128, {}})},
      {"9b", every_fourth_full({4096, 12288, 32, 16, 4, 256, 16, 32, 128, 128, {}})},
      {"27b", every_fourth_full({5120, 17408, 64, 24, 4, 256, 16, 48, 128, 128, {}})}};
  for (const Published& p : kPublished)
    if (size == p.size) return &p.dims;
  return nullptr;
}

}  // namespace kev
