// Unit tests of the export layer's pieces. The merge kernel's oracle here is the documented
// per-element formula evaluated in float64 where that is exact, and cross-ISA bit identity;
// bit identity with torch itself is checked in tests/integration/test_export*.py.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <nlohmann/json.hpp>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <functional>
#include <map>
#include <random>
#include <vector>

#include "export/error_kind.h"
#include "kev/core/bf16.h"
#include "kev/core/error.h"
#include "kev/core/file.h"
#include "kev/core/sha256.h"
#include "kev/export/configs.h"
#include "kev/export/family.h"
#include "kev/export/inputs.h"
#include "kev/export/inventory.h"
#include "kev/export/pin.h"
#include "kev/export/recipe.h"

namespace kev {
namespace {

namespace fs = std::filesystem;

std::string good_recipe(const std::string& config_hash = "null") {
  return R"({"format": "kev-4b-merged/1", "model": "kev-4b",
    "base": {"repo": "Qwen/Qwen3.5-4B-Base", "revision": "1001bb4d826a52d1f399e183466143f4da7b741b",
             "files": {"config.json": )" +
         config_hash + R"(, "tokenizer.json": null, "tokenizer_config.json": null,
                       "model.safetensors.index.json": null}},
    "checkpoint": {"repo": "jaredpalmer/kev-4b", "revision": "139fdd94f1b6a6ad80cc15e08fcb99cac885a101",
             "files": {"adapter_config.json": null, "adapter_model.safetensors": null, "head.pt": null}},
    "reference": {"repo": "jaredpalmer/kev", "revision": "2074cc44"},
    "lora": {"rank": 16, "alpha": 32, "targets": 248}})";
}

using export_test::kind_of;

TEST(Recipe, ParsesTheShippedRecipe) {
  Recipe r = load_recipe(std::string(KEV_SOURCE_DIR) + "/recipes/kev-4b.json");
  EXPECT_EQ(r.model, "kev-4b");
  EXPECT_EQ(r.base.revision, "1001bb4d826a52d1f399e183466143f4da7b741b");
  EXPECT_EQ(r.checkpoint.revision, "139fdd94f1b6a6ad80cc15e08fcb99cac885a101");
  EXPECT_EQ(r.rank, 16);
  EXPECT_EQ(r.alpha, 32);
  EXPECT_EQ(r.targets, 248);
  for (const auto& [name, hash] : r.base.files) EXPECT_FALSE(hash) << name;
  std::string msg;
  EXPECT_EQ(kind_of([&] { require_fully_pinned(r, "recipes/kev-4b.json"); }, &msg),
            ErrorKind::kBadInput);
  EXPECT_NE(msg.find("kev pin"), std::string::npos) << msg;
}

TEST(Recipe, RoundTripsThroughJson) {
  std::string h(64, 'a');
  Recipe r = parse_recipe(good_recipe("\"" + h + "\""), "r");
  Recipe again = parse_recipe(recipe_to_json(r), "r2");
  EXPECT_EQ(again.base.files.at("config.json"), h);
  EXPECT_EQ(again.reference_revision, "2074cc44");
  EXPECT_EQ(recipe_to_json(again), recipe_to_json(r));
}

TEST(Recipe, RefusesMalformedFields) {
  auto bad = [](std::string from, std::string to) {
    std::string s = good_recipe();
    auto at = s.find(from);
    EXPECT_NE(at, std::string::npos) << from;
    s.replace(at, from.size(), to);
    return kind_of([&] { parse_recipe(s, "r"); });
  };
  EXPECT_EQ(bad("\"config.json\": null", "\"config.json\": \"ABC\""), ErrorKind::kBadInput);
  EXPECT_EQ(bad("\"config.json\": null", "\"../config.json\": null"), ErrorKind::kBadInput);
  EXPECT_EQ(bad("1001bb4d", "zz01bb4d"), ErrorKind::kBadInput);
  EXPECT_EQ(bad("\"rank\": 16", "\"rank\": 0"), ErrorKind::kBadInput);
  EXPECT_EQ(bad("kev-4b-merged/1", "kev-4b-merged/9"), ErrorKind::kUnsupported);
  EXPECT_EQ(bad("\"head.pt\": null", "\"head2.pt\": null"), ErrorKind::kBadInput);
  EXPECT_EQ(kind_of([] { parse_recipe("[1]", "r"); }), ErrorKind::kBadInput);
}

TEST(Inputs, HashMismatchNamesBothDigestsAndParsesNothing) {
  fs::path dir = fs::temp_directory_path() / ("kev_inputs_" + std::to_string(::getpid()));
  fs::create_directories(dir / "base");
  fs::create_directories(dir / "ckpt");
  std::vector<std::pair<std::string, std::string>> files = {
      {"base/config.json", "{}"},           {"base/tokenizer.json", "{}"},
      {"base/tokenizer_config.json", "{}"}, {"base/model.safetensors.index.json", "{}"},
      {"ckpt/adapter_config.json", "{}"},   {"ckpt/adapter_model.safetensors", "x"},
      {"ckpt/head.pt", "garbage"}};
  for (auto& [p, c] : files) write_file_synced((dir / p).string(), c);
  Recipe r = parse_recipe(good_recipe(), "r");
  for (auto* repo : {&r.base, &r.checkpoint})
    for (auto& [name, hash] : repo->files)
      hash = sha256_file((dir / (repo == &r.base ? "base" : "ckpt") / name).string());
  VerifiedInputs ok =
      verify_pinned_inputs(r, "r", (dir / "base").string(), (dir / "ckpt").string());
  EXPECT_EQ(ok.bytes("checkpoint/head.pt"), "garbage");
  // The adapter is parsed from the hashed bytes, not re-read from disk.
  EXPECT_EQ(ok.bytes("checkpoint/adapter_model.safetensors"), "x");
  EXPECT_EQ(ok.digests.size(), 7u);

  std::string pinned = *r.base.files["config.json"];
  fs::remove(dir / "base/config.json");
  write_file_synced((dir / "base/config.json").string(), "{\"x\":1}");
  std::string msg;
  EXPECT_EQ(
      kind_of(
          [&] { verify_pinned_inputs(r, "r", (dir / "base").string(), (dir / "ckpt").string()); },
          &msg),
      ErrorKind::kIntegrity);
  EXPECT_NE(msg.find("base/config.json"), std::string::npos);
  EXPECT_NE(msg.find(pinned), std::string::npos);
  EXPECT_NE(msg.find(sha256_hex("{\"x\":1}")), std::string::npos);

  fs::remove(dir / "ckpt/head.pt");
  EXPECT_EQ(
      kind_of(
          [&] { verify_pinned_inputs(r, "r", (dir / "base").string(), (dir / "ckpt").string()); },
          &msg),
      ErrorKind::kIo);
  fs::remove_all(dir);
}

TEST(Inputs, ShardChangedAfterHashingIsRefused) {
  fs::path dir = fs::temp_directory_path() / ("kev_recheck_" + std::to_string(::getpid()));
  fs::create_directories(dir);
  std::string shard = (dir / "s.safetensors").string();
  write_file_synced(shard, "0123456789");
  VerifiedInputs in;
  in.base_dir = dir.string();
  in.identities["base/s.safetensors"] = file_identity(shard);
  in.check_unchanged();  // untouched: passes

  // Same size, new bytes, then the mtime put back: ctime still differs.
  struct stat before {};
  ASSERT_EQ(::stat(shard.c_str(), &before), 0);
  ::usleep(20000);
  {
    int fd = ::open(shard.c_str(), O_WRONLY);
    ASSERT_GE(fd, 0);
    ASSERT_EQ(::pwrite(fd, "X", 1, 3), 1);
    ::close(fd);
  }
  struct timespec times[2] = {before.st_atim, before.st_mtim};
  ASSERT_EQ(::utimensat(AT_FDCWD, shard.c_str(), times, 0), 0);
  std::string msg;
  EXPECT_EQ(kind_of([&] { in.check_unchanged(); }, &msg), ErrorKind::kIntegrity);
  EXPECT_NE(msg.find("base/s.safetensors"), std::string::npos) << msg;

  // Replaced by another file (new inode) with the original bytes.
  in.identities["base/s.safetensors"] = file_identity(shard);
  write_file_synced((dir / "new").string(), "0123456789");
  fs::rename(dir / "new", shard);
  EXPECT_EQ(kind_of([&] { in.check_unchanged(); }), ErrorKind::kIntegrity);

  // Removed.
  in.identities["base/s.safetensors"] = file_identity(shard);
  fs::remove(shard);
  EXPECT_EQ(kind_of([&] { in.check_unchanged(); }), ErrorKind::kIntegrity);
  fs::remove_all(dir);
}

TEST(Inventory, SafetensorsViewReadsTensorsInPlace) {
  std::vector<TensorSpec> specs = {{"a", DType::kF32, {2}}, {"b", DType::kF32, {1}}};
  std::string bytes = safetensors_header_bytes(specs, {});
  const float values[3] = {1.5f, -2.0f, 3.25f};
  bytes.append(reinterpret_cast<const char*>(values), sizeof(values));
  SafetensorsView buf(bytes, "adapter");
  ASSERT_EQ(buf.tensors().size(), 2u);
  float got[3];
  std::memcpy(got, buf.data(buf.get("a")), 8);
  std::memcpy(got + 2, buf.data(buf.get("b")), 4);
  EXPECT_EQ(got[0], 1.5f);
  EXPECT_EQ(got[1], -2.0f);
  EXPECT_EQ(got[2], 3.25f);
  EXPECT_EQ(buf.find("c"), nullptr);
  EXPECT_EQ(kind_of([&] { buf.get("c"); }), ErrorKind::kBadInput);
  EXPECT_EQ(kind_of([&] { SafetensorsView(bytes.substr(0, bytes.size() - 1), "x"); }),
            ErrorKind::kBadInput);
}

const char* kConfig = R"({"text_config": {"hidden_size": 64, "num_hidden_layers": 8,
  "intermediate_size": 96, "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 16,
  "linear_num_key_heads": 2, "linear_num_value_heads": 4, "linear_key_head_dim": 8,
  "linear_value_head_dim": 8,
  "layer_types": ["linear_attention","linear_attention","linear_attention","full_attention",
                  "linear_attention","linear_attention","linear_attention","full_attention"]}})";

const char* kAdapterConfig = R"({"peft_type": "LORA", "r": 16, "lora_alpha": 32,
  "target_modules": ["q_proj","k_proj","v_proj","o_proj","gate_proj","up_proj","down_proj",
                     "in_proj_qkv","in_proj_z","in_proj_a","in_proj_b","out_proj"],
  "use_dora": false, "use_rslora": false, "fan_in_fan_out": false, "bias": "none",
  "modules_to_save": null})";

TEST(Configs, InventoryFollowsLayerTypes) {
  BaseTextConfig c = parse_base_text_config(kConfig, "config.json");
  LoraConfig l = parse_lora_config(kAdapterConfig, "adapter_config.json");
  auto t = expected_targets(c, l);
  // 8 layers: 6 GDN x 5 + 2 attention x 4 + 8 x 3 MLP.
  EXPECT_EQ(t.size(), 30u + 8u + 24u);
  EXPECT_EQ(t[0].base_name, "model.language_model.layers.0.mlp.gate_proj.weight");
  EXPECT_EQ(t[0].a_name, "base_model.model.layers.0.mlp.gate_proj.lora_A.weight");
  std::string msg;
  EXPECT_EQ(kind_of([&] { check_member_counts(*find_member("kev-4b"), t); }, &msg),
            ErrorKind::kBadInput);
  EXPECT_NE(msg.find("248"), std::string::npos);
}

// The family's inventories follow from each base's layer structure: L x 3 MLP, 4 per full
// attention layer (every fourth), 5 per GDN layer. Expected numbers are that arithmetic.
TEST(Family, CountsFollowTheBaseConfigs) {
  std::map<std::string, std::pair<int64_t, int64_t>> layers_full = {{"kev-0.8b", {24, 6}},
                                                                    {"kev-4b", {32, 8}},
                                                                    {"kev-9b", {32, 8}},
                                                                    {"kev-27b", {64, 16}},
                                                                    {"kev-27b-v1-lora", {64, 16}}};
  ASSERT_EQ(kev_family().size(), layers_full.size());
  for (const auto& m : kev_family()) {
    auto [layers, full] = layers_full.at(m.model);
    EXPECT_EQ(static_cast<int64_t>(m.config.full_attention.size()), layers) << m.model;
    if (m.weights == "full") {  // Kev 1.0's Kev-27B: no adapter, nothing to count
      EXPECT_EQ(m.model, "kev-27b");
      EXPECT_EQ(member_counts(m).total(), 0);
      EXPECT_EQ(known_recipe(m.model).weights, "full");
      continue;
    }
    TargetCounts c = member_counts(m);
    EXPECT_EQ(c.mlp, 3 * layers) << m.model;
    EXPECT_EQ(c.attention, 4 * full) << m.model;
    EXPECT_EQ(c.gdn, 5 * (layers - full)) << m.model;
    EXPECT_EQ(known_recipe(m.model).targets, c.total()) << m.model;
  }
  EXPECT_EQ(member_counts(*find_member("kev-0.8b")).total(), 186);
  EXPECT_EQ(member_counts(*find_member("kev-4b")).total(), 248);
  EXPECT_EQ(member_counts(*find_member("kev-9b")).total(), 248);
  EXPECT_EQ(member_counts(*find_member("kev-27b-v1-lora")).total(), 496);
  EXPECT_EQ(find_member("kev-1b"), nullptr);
  EXPECT_EQ(kind_of([&] { known_recipe("kev-1b"); }), ErrorKind::kUnsupported);
}

TEST(Family, ShippedRecipesMatchTheBuiltInOnes) {
  for (const auto& m : kev_family()) {
    Recipe shipped = load_recipe(std::string(KEV_SOURCE_DIR) + "/recipes/" + m.model + ".json");
    std::string msg;
    EXPECT_EQ(kind_of([&] { require_fully_pinned(shipped, "r.json"); }, &msg),
              ErrorKind::kBadInput);
    // Shard names come from the base index at pin time; a shipped recipe may list them.
    std::erase_if(shipped.base.files, [](const auto& f) {
      for (const char* required : kRequiredBaseFiles)
        if (f.first == required) return false;
      return true;
    });
    EXPECT_EQ(recipe_to_json(shipped), recipe_to_json(known_recipe(m.model))) << m.model;
  }
}

TEST(Configs, Kev4bHas248Targets) {
  std::string layer_types;
  for (int i = 0; i < 32; ++i)
    layer_types +=
        std::string(i ? "," : "") + (i % 4 == 3 ? "\"full_attention\"" : "\"linear_attention\"");
  std::string cfg =
      R"({"text_config": {"hidden_size": 2560, "num_hidden_layers": 32,
        "intermediate_size": 9216, "num_attention_heads": 16, "num_key_value_heads": 4,
        "head_dim": 256, "linear_num_key_heads": 16, "linear_num_value_heads": 32,
        "linear_key_head_dim": 128, "linear_value_head_dim": 128, "layer_types": [)" +
      layer_types + "]}}";
  auto t =
      expected_targets(parse_base_text_config(cfg, "c"), parse_lora_config(kAdapterConfig, "a"));
  EXPECT_EQ(t.size(), 248u);
  check_member_counts(*find_member("kev-4b"), t);
  // Base shapes as REFERENCE.md lists them for Kev-4B (h = 2560).
  std::map<std::string, std::vector<int64_t>> want = {
      {"layers.3.mlp.gate_proj", {9216, 2560}},
      {"layers.3.mlp.down_proj", {2560, 9216}},
      {"layers.3.self_attn.q_proj", {16 * 256 * 2, 2560}},
      {"layers.3.self_attn.k_proj", {4 * 256, 2560}},
      {"layers.3.self_attn.v_proj", {4 * 256, 2560}},
      {"layers.3.self_attn.o_proj", {2560, 16 * 256}},
      {"layers.0.linear_attn.in_proj_qkv", {2 * 16 * 128 + 32 * 128, 2560}},
      {"layers.0.linear_attn.in_proj_z", {32 * 128, 2560}},
      {"layers.0.linear_attn.in_proj_a", {32, 2560}},
      {"layers.0.linear_attn.in_proj_b", {32, 2560}},
      {"layers.0.linear_attn.out_proj", {2560, 32 * 128}}};
  size_t seen = 0;
  for (const auto& target : t) {
    auto it = want.find(target.base_name.substr(std::string("model.language_model.").size(),
                                                target.base_name.size() - 28));
    if (it == want.end()) continue;
    EXPECT_EQ(target.base_shape, it->second) << target.base_name;
    ++seen;
  }
  EXPECT_EQ(seen, want.size());
}

TEST(Configs, ProjectionSizesAreRequired) {
  nlohmann::json j = nlohmann::json::parse(kConfig);
  j["text_config"].erase("intermediate_size");
  std::string msg;
  EXPECT_EQ(kind_of([&] { parse_base_text_config(j.dump(), "config.json"); }, &msg),
            ErrorKind::kBadInput);
  EXPECT_NE(msg.find("intermediate_size"), std::string::npos) << msg;
  j = nlohmann::json::parse(kConfig);
  j["text_config"]["linear_key_head_dim"] = 0;
  EXPECT_EQ(kind_of([&] { parse_base_text_config(j.dump(), "config.json"); }),
            ErrorKind::kBadInput);
}

TEST(Configs, RefusesNonPlainLora) {
  auto with = [](const std::string& key, const std::string& value) {
    nlohmann::json j = nlohmann::json::parse(kAdapterConfig);
    j[key] = nlohmann::json::parse(value);
    return kind_of([&] { parse_lora_config(j.dump(), "adapter_config.json"); });
  };
  EXPECT_EQ(with("use_dora", "true"), ErrorKind::kUnsupported);
  EXPECT_EQ(with("use_rslora", "true"), ErrorKind::kUnsupported);
  EXPECT_EQ(with("fan_in_fan_out", "true"), ErrorKind::kUnsupported);
  EXPECT_EQ(with("bias", "\"lora_only\""), ErrorKind::kUnsupported);
  EXPECT_EQ(with("modules_to_save", "[\"score\"]"), ErrorKind::kUnsupported);
  EXPECT_EQ(with("rank_pattern", "{\"q_proj\": 8}"), ErrorKind::kUnsupported);
  EXPECT_EQ(with("target_modules", "\"all-linear\""), ErrorKind::kUnsupported);
  EXPECT_EQ(with("peft_type", "\"IA3\""), ErrorKind::kUnsupported);
  EXPECT_EQ(with("r", "0"), ErrorKind::kBadInput);
  EXPECT_EQ(with("trainable_token_indices", "[248060, 248061]"), ErrorKind::kUnsupported);
  EXPECT_EQ(with("trainable_token_indices", "{\"embed_tokens\": [1]}"), ErrorKind::kUnsupported);
  EXPECT_EQ(with("lora_bias", "true"), ErrorKind::kUnsupported);
  EXPECT_EQ(with("exclude_modules", "[\"o_proj\"]"), ErrorKind::kUnsupported);
  EXPECT_EQ(with("init_lora_weights", "\"pissa_niter_4\""), ErrorKind::kUnsupported);
  EXPECT_EQ(with("init_lora_weights", "\"loftq\""), ErrorKind::kUnsupported);
  EXPECT_EQ(with("a_future_setting", "2"), ErrorKind::kUnsupported);
  EXPECT_EQ(with("a_future_setting", "\"on\""), ErrorKind::kUnsupported);
  {  // settings left off, known provenance and training-only keys are accepted
    nlohmann::json j = nlohmann::json::parse(kAdapterConfig);
    for (const char* k : {"trainable_token_indices", "exclude_modules", "a_future_setting"})
      j[k] = nullptr;
    j["a_future_flag"] = false;
    j["a_future_map"] = nlohmann::json::object();
    j["peft_version"] = "0.21.0";
    j["lora_dropout"] = 0.05;
    j["init_lora_weights"] = "gaussian";
    j["qalora_group_size"] = 16;
    EXPECT_EQ(parse_lora_config(j.dump(), "a").rank, 16);
  }
  {  // an empty modules_to_save is the same as none
    nlohmann::json j = nlohmann::json::parse(kAdapterConfig);
    j["modules_to_save"] = nlohmann::json::array();
    EXPECT_EQ(parse_lora_config(j.dump(), "a").rank, 16);
  }
  LoraConfig l = parse_lora_config(kAdapterConfig, "a");
  l.target_modules.push_back("lm_head");
  EXPECT_EQ(kind_of([&] { expected_targets(parse_base_text_config(kConfig, "c"), l); }),
            ErrorKind::kUnsupported);
}

TEST(Configs, DelimitersComeFromAddedTokensByContent) {
  const char* tok = R"({"added_tokens": [
    {"id": 9, "content": "<|box_end|>"}, {"id": 5, "content": "<|fim_prefix|>"},
    {"id": 6, "content": "<|fim_middle|>"}, {"id": 7, "content": "<|fim_suffix|>"},
    {"id": 8, "content": "<|box_start|>"}]})";
  Delimiters d = parse_delimiters(tok, "tokenizer.json");
  EXPECT_EQ(d.state, 5);
  EXPECT_EQ(d.question, 6);
  EXPECT_EQ(d.decide, 7);
  EXPECT_EQ(d.option_open, 8);
  EXPECT_EQ(d.option_close, 9);
  EXPECT_EQ(kind_of([] { parse_delimiters(R"({"added_tokens": []})", "t"); }),
            ErrorKind::kBadInput);
}

TEST(Pin, GitBlobSha1MatchesGit) {
  // `printf 'hello\n' | git hash-object --stdin`
  EXPECT_EQ(git_blob_sha1("hello\n"), "ce013625030ba8dba906f756967f9e9ca394464a");
}

}  // namespace
}  // namespace kev
