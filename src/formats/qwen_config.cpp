#include "kev/formats/qwen_config.h"

#include "kev/core/error.h"
#include "kev/core/json_strict.h"

namespace kev {

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

}  // namespace kev
