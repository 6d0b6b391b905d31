// Full-weight checkpoints: the recipe form, upstream's weights_sha256, the config and tensor
// checks (export/full_weights.h). Expected values are written here from the documented rules.
#include "kev/export/full_weights.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <functional>
#include <string>

#include "export/error_kind.h"
#include "kev/core/error.h"
#include "kev/core/file.h"
#include "kev/core/sha256.h"
#include "kev/export/recipe.h"

namespace kev {
namespace {

using export_test::kind_of;

const char* kFullRecipe = R"({"format": "kev-4b-merged/1", "model": "kev-27b", "weights": "full",
  "base": {"repo": "Qwen/Qwen3.8-27B", "revision": null},
  "checkpoint": {"repo": "jaredpalmer/kev-27b", "revision": "ef78cc8a34d5f426fb229c52089db189218cfe5c",
    "files": {"config.json": null, "tokenizer.json": null, "tokenizer_config.json": null,
              "model.safetensors.index.json": null, "head.pt": null}},
  "reference": {"repo": "jaredpalmer/kev", "revision": "0771e6d1"}})";

TEST(FullRecipe, ParsesAndRoundTrips) {
  Recipe r = parse_recipe(kFullRecipe, "r");
  EXPECT_EQ(r.weights, "full");
  EXPECT_TRUE(r.base.files.empty());
  EXPECT_EQ(r.checkpoint.files.size(), 5u);
  Recipe again = parse_recipe(recipe_to_json(r), "r2");
  EXPECT_EQ(recipe_to_json(again), recipe_to_json(r));
  EXPECT_EQ(recipe_to_json(r).find("\"lora\""), std::string::npos);
  // The base is identity only: its null revision is not what require_fully_pinned names.
  std::string msg;
  EXPECT_EQ(kind_of([&] { require_fully_pinned(r, "r"); }, &msg), ErrorKind::kBadInput);
  EXPECT_NE(msg.find("checkpoint/"), std::string::npos) << msg;
}

TEST(FullRecipe, RefusesWhatAFullRecipeCannotHold) {
  auto edited = [](std::string from, std::string to) {
    std::string s = kFullRecipe;
    s.replace(s.find(from), from.size(), to);
    return s;
  };
  std::string msg;
  EXPECT_EQ(kind_of(
                [&] {
                  parse_recipe(edited("\"revision\": null}", "\"revision\": null, \"files\": {}}"),
                               "r");
                },
                &msg),
            ErrorKind::kBadInput);
  EXPECT_NE(msg.find("pins no base files"), std::string::npos) << msg;
  EXPECT_EQ(kind_of(
                [&] {
                  parse_recipe(edited("\"head.pt\": null",
                                      "\"head.pt\": null, \"adapter_config.json\": "
                                      "null"),
                               "r");
                },
                &msg),
            ErrorKind::kBadInput);
  EXPECT_NE(msg.find("no adapter"), std::string::npos) << msg;
  EXPECT_EQ(kind_of([&] { parse_recipe(edited(", \"head.pt\": null", ""), "r"); }, &msg),
            ErrorKind::kBadInput);
  EXPECT_NE(msg.find("head.pt"), std::string::npos) << msg;
  EXPECT_EQ(kind_of([&] {
              parse_recipe(edited("\"weights\": \"full\"", "\"weights\": \"merged\""), "r");
            }),
            ErrorKind::kBadInput);
  std::string with_lora = kFullRecipe;
  with_lora.insert(with_lora.rfind('}'),
                   ", \"lora\": {\"rank\": 16, \"alpha\": 32, \"targets\": 1}");
  EXPECT_EQ(kind_of([&] { parse_recipe(with_lora, "r"); }, &msg), ErrorKind::kBadInput);
  EXPECT_NE(msg.find("no \"lora\""), std::string::npos) << msg;
}

TEST(FullWeights, Sha256IsUpstreamsLineDigest) {
  // sha256 over "<name>:<sha256>\n" lines, names ascending (whatever order they are given in).
  std::map<std::string, std::string> shards = {{"model-00002-of-00002.safetensors", "bb"},
                                               {"model-00001-of-00002.safetensors", "aa"}};
  EXPECT_EQ(
      full_weights_sha256(shards),
      sha256_hex("model-00001-of-00002.safetensors:aa\nmodel-00002-of-00002.safetensors:bb\n"));
  // SHA-256("a:b\n"), computed outside kev (printf 'a:b\n' | sha256sum).
  EXPECT_EQ(full_weights_sha256({{"a", "b"}}),
            "c467ccce5a16dc728ec6a5d89263821f0a9bd359d42e604105338262f3cc5725");
}

std::string text_config(const std::string& extra) {
  return R"({"model_type": "qwen3_5_text", "hidden_size": 8, "intermediate_size": 12,
    "num_hidden_layers": 4, "num_attention_heads": 2, "num_key_value_heads": 1, "head_dim": 4,
    "linear_num_key_heads": 1, "linear_num_value_heads": 2, "linear_key_head_dim": 4,
    "linear_value_head_dim": 4, "linear_conv_kernel_dim": 4, "vocab_size": 16,
    "layer_types": ["linear_attention", "linear_attention", "linear_attention", "full_attention"])" +
         extra + "}";
}

TEST(FullWeights, ConfigMustBeTheTextModelsInBfloat16) {
  FullConfig c = parse_full_config(text_config(R"(, "dtype": "bfloat16")"), "c");
  EXPECT_EQ(c.vocab, 16);
  EXPECT_EQ(c.conv_kernel, 4);
  auto t = full_expected_tensors(c);
  // 2 global + 4 layers x 5 common + 3 GDN layers x 9 + 1 attention layer x 6
  EXPECT_EQ(t.size(), 2u + 4 * 5 + 3 * 9 + 6);
  EXPECT_EQ(t.at("embed_tokens.weight"), (std::vector<int64_t>{16, 8}));
  EXPECT_EQ(t.at("layers.0.linear_attn.conv1d.weight"), (std::vector<int64_t>{2 * 4 + 8, 1, 4}));
  EXPECT_EQ(t.at("layers.3.self_attn.q_proj.weight"), (std::vector<int64_t>{2 * 4 * 2, 8}));
  EXPECT_EQ(t.count("lm_head.weight"), 0u);
  std::string msg;
  EXPECT_EQ(kind_of([] { parse_full_config(text_config(R"(, "dtype": "float32")"), "c"); }, &msg),
            ErrorKind::kUnsupported);
  EXPECT_NE(msg.find("\"dtype\" is \"float32\""), std::string::npos) << msg;
  EXPECT_EQ(
      kind_of([] { parse_full_config(R"({"model_type": "qwen3_5", "text_config": {}})", "c"); },
              &msg),
      ErrorKind::kUnsupported);
  EXPECT_NE(msg.find("no text_config"), std::string::npos) << msg;
  // torch_dtype (older transformers) is read where dtype is absent.
  EXPECT_EQ(kind_of([] { parse_full_config(text_config(R"(, "torch_dtype": "float16")"), "c"); }),
            ErrorKind::kUnsupported);
  // A value nested 200,000 deep is named, not printed (printing recurses: a stack overflow).
  const std::string deep = std::string(200000, '[') + std::string(200000, ']');
  EXPECT_EQ(kind_of([&] { parse_full_config(text_config(", \"dtype\": " + deep), "c"); }, &msg),
            ErrorKind::kUnsupported);
  EXPECT_NE(msg.find("\"dtype\" is array"), std::string::npos) << msg;
}

TEST(FullWeights, FormFromFilesIsUpstreamsRule) {
  namespace fs = std::filesystem;
  fs::path d = fs::temp_directory_path() / ("kev_full_form_" + std::to_string(::getpid()));
  fs::create_directories(d);
  EXPECT_EQ(checkpoint_form_from_files(d.string()), "");
  write_file_synced((d / "config.json").string(), "{}");
  EXPECT_EQ(checkpoint_form_from_files(d.string()), "");
  write_file_synced((d / "model-00001-of-00001.safetensors").string(), "x");
  EXPECT_EQ(checkpoint_form_from_files(d.string()), "full");
  write_file_synced((d / "adapter_config.json").string(), "{}");
  EXPECT_EQ(checkpoint_form_from_files(d.string()), "lora");
  fs::remove_all(d);
}

}  // namespace
}  // namespace kev
