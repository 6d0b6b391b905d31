// ModelConfig: accepts the released layouts, refuses unsupported settings by name.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include <functional>
#include <iterator>
#include <vector>

#include "kev/core/error.h"
#include "kev/export/configs.h"
#include "kev/model/config.h"

namespace kev {
namespace {

nlohmann::json base_4b() {
  nlohmann::json tc = {{"model_type", "qwen3_5_text"},
                       {"hidden_size", 2560},
                       {"intermediate_size", 9216},
                       {"num_hidden_layers", 32},
                       {"num_attention_heads", 16},
                       {"num_key_value_heads", 4},
                       {"head_dim", 256},
                       {"linear_num_key_heads", 16},
                       {"linear_num_value_heads", 32},
                       {"linear_key_head_dim", 128},
                       {"linear_value_head_dim", 128},
                       {"linear_conv_kernel_dim", 4},
                       {"full_attention_interval", 4},
                       {"rms_norm_eps", 1e-6},
                       {"vocab_size", 248320},
                       {"attn_output_gate", true},
                       {"hidden_act", "silu"},
                       {"rope_parameters",
                        {{"rope_type", "default"},
                         {"rope_theta", 10000000},
                         {"partial_rotary_factor", 0.25},
                         {"mrope_section", {11, 11, 10}},
                         {"mrope_interleaved", true}}}};
  return {{"model_type", "qwen3_5"}, {"text_config", tc}};
}

ErrorKind kind_of(const nlohmann::json& j) {
  try {
    ModelConfig::parse(j.dump(), "config.json");
  } catch (const Error& e) {
    return e.kind();
  }
  return ErrorKind::kInternal;  // "did not throw"
}

TEST(Config, Parses4b) {
  ModelConfig c = ModelConfig::parse(base_4b().dump(), "config.json");
  EXPECT_EQ(c.hidden, 2560);
  EXPECT_EQ(c.rotary_dim, 64);
  EXPECT_EQ(c.conv_dim(), 8192);
  ASSERT_EQ(c.full_attention.size(), 32u);
  for (int l = 0; l < 32; ++l) EXPECT_EQ(c.full_attention[l], l % 4 == 3) << l;
  EXPECT_DOUBLE_EQ(c.rope_theta, 1e7);
}

TEST(Config, FlatRopeFieldsAndLayerTypes) {
  auto j = base_4b();
  auto& tc = j["text_config"];
  tc.erase("rope_parameters");
  tc["rope_theta"] = 1e6;
  tc["partial_rotary_factor"] = 0.5;
  nlohmann::json types = nlohmann::json::array();
  for (int l = 0; l < 32; ++l) types.push_back(l == 0 ? "full_attention" : "linear_attention");
  tc["layer_types"] = types;
  ModelConfig c = ModelConfig::parse(j.dump(), "config.json");
  EXPECT_EQ(c.rotary_dim, 128);
  EXPECT_TRUE(c.full_attention[0]);
  EXPECT_FALSE(c.full_attention[3]);
}

TEST(Config, DeeplyNestedValuesAreNamedNotPrinted) {
  // Printing a 200000-deep value recursively would overflow the stack.
  std::string text = base_4b().dump();
  const std::string silu = R"("hidden_act":"silu")";
  ASSERT_NE(text.find(silu), std::string::npos);
  const size_t deep = 200000;
  text.replace(text.find(silu), silu.size(),
               R"("hidden_act":)" + std::string(deep, '[') + std::string(deep, ']'));
  try {
    ModelConfig::parse(text, "config.json");
    FAIL() << "accepted";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kUnsupported);
    EXPECT_NE(std::string(e.what()).find("hidden_act array"), std::string::npos) << e.what();
  }
}

TEST(Config, RefusesUnsupportedSettings) {
  auto set = [](const char* key, nlohmann::json v) {
    auto j = base_4b();
    j["text_config"][key] = v;
    return j;
  };
  auto rope = [](const char* key, nlohmann::json v) {
    auto j = base_4b();
    j["text_config"]["rope_parameters"][key] = v;
    return j;
  };
  EXPECT_EQ(kind_of(set("attn_output_gate", false)), ErrorKind::kUnsupported);
  EXPECT_EQ(kind_of(set("attention_bias", true)), ErrorKind::kUnsupported);
  EXPECT_EQ(kind_of(set("hidden_act", "gelu")), ErrorKind::kUnsupported);
  EXPECT_EQ(kind_of(set("model_type", "qwen3_next")), ErrorKind::kUnsupported);
  EXPECT_EQ(kind_of(rope("rope_type", "yarn")), ErrorKind::kUnsupported);
  EXPECT_EQ(kind_of(rope("partial_rotary_factor", 0.01)), ErrorKind::kUnsupported);  // 2.56 dims
  EXPECT_EQ(kind_of(rope("mrope_section", {8, -1, 8})), ErrorKind::kBadInput);
  EXPECT_EQ(kind_of(set("linear_num_value_heads", 24)), ErrorKind::kBadInput);  // 24 % 16
  EXPECT_EQ(kind_of(set("num_key_value_heads", 3)), ErrorKind::kBadInput);
  EXPECT_EQ(kind_of(set("hidden_size", "2560")), ErrorKind::kBadInput);
  EXPECT_EQ(kind_of(set("layer_types", {"full_attention"})), ErrorKind::kBadInput);
  auto missing = base_4b();
  missing["text_config"].erase("linear_key_head_dim");
  EXPECT_EQ(kind_of(missing), ErrorKind::kBadInput);
  try {
    ModelConfig::parse(set("attn_output_gate", false).dump(), "dir/config.json");
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("attn_output_gate"), std::string::npos);
    EXPECT_NE(std::string(e.what()).find("dir/config.json"), std::string::npos);
  }
}

// The exporter and the runtime read a config's layer kinds by one rule (formats/qwen_config.h):
// each accepts what the other accepts, with the same kinds, and refuses with the same kind of
// error. Expected kinds: transformers' rule, full attention where (l + 1) % interval == 0.
TEST(Config, ExportAndRuntimeReadLayerKindsAlike) {
  auto outcome = [](const std::function<std::vector<bool>()>& read, std::vector<bool>* kinds) {
    try {
      *kinds = read();
    } catch (const Error& e) {
      return e.kind();
    }
    return ErrorKind::kInternal;  // accepted
  };
  auto with = [](const char* key, const nlohmann::json& v) {
    auto j = base_4b();
    if (v.is_null())
      j["text_config"].erase(key);
    else
      j["text_config"][key] = v;
    return j;
  };
  nlohmann::json kinds32 = nlohmann::json::array();
  for (int l = 0; l < 32; ++l) kinds32.push_back(l % 2 ? "full_attention" : "linear_attention");
  nlohmann::json bad_kind = kinds32;
  bad_kind[5] = "sliding_attention";
  const nlohmann::json configs[] = {
      base_4b(),                                                       // interval 4
      with("full_attention_interval", 8),                              // interval 8
      with("layer_types", kinds32),                                    // explicit
      with("layer_types", nlohmann::json::array({"full_attention"})),  // wrong count
      with("layer_types", bad_kind),                                   // unknown kind
      with("layer_types", "full_attention"),                           // not a list
      with("full_attention_interval", nullptr),                        // neither
      with("full_attention_interval", 0),                              // not positive
  };
  const ErrorKind expected[] = {ErrorKind::kInternal, ErrorKind::kInternal,    ErrorKind::kInternal,
                                ErrorKind::kBadInput, ErrorKind::kUnsupported, ErrorKind::kBadInput,
                                ErrorKind::kBadInput, ErrorKind::kBadInput};
  for (size_t i = 0; i < std::size(configs); ++i) {
    const std::string text = configs[i].dump();
    std::vector<bool> model_kinds, export_kinds;
    const ErrorKind m = outcome(
        [&] { return ModelConfig::parse(text, "config.json").full_attention; }, &model_kinds);
    const ErrorKind e = outcome(
        [&] { return parse_base_text_config(text, "config.json").full_attention; }, &export_kinds);
    EXPECT_EQ(m, expected[i]) << i;
    EXPECT_EQ(e, expected[i]) << i;
    EXPECT_EQ(model_kinds, export_kinds) << i;
  }
  std::vector<bool> kinds;
  outcome([&] { return ModelConfig::parse(configs[1].dump(), "c").full_attention; }, &kinds);
  ASSERT_EQ(kinds.size(), 32u);
  for (int l = 0; l < 32; ++l) EXPECT_EQ(kinds[l], l == 7 || l == 15 || l == 23 || l == 31) << l;
}

}  // namespace
}  // namespace kev
