// member_from_config: the family member `kev pin` tells from a checkpoint without --model (its
// form and the text config of the backbone it runs on). The expected members are stated here
// from the bases' published configs (recipes/README.md names the sources), written as the
// config.json text a download holds and parsed as pin parses it, not read from the family table.
#include <gtest/gtest.h>

#include <cstdint>
#include <string>
#include <vector>

#include "export/error_kind.h"
#include "kev/core/error.h"
#include "kev/export/configs.h"
#include "kev/export/family.h"
#include "kev/export/full_weights.h"
#include "kev/export/pin.h"

namespace kev {
namespace {

using export_test::kind_of;

struct PublishedText {
  int64_t hidden, intermediate, layers, heads, kv_heads, head_dim;
  int64_t linear_key_heads, linear_value_heads, linear_key_dim, linear_value_dim;
  int64_t full_every = 4;  // full attention on every full_every-th layer
};

// Qwen3.5-0.8B-Base, Qwen3.5-4B-Base, Qwen3.5-9B-Base, Qwen3.8-27B (text settings).
constexpr PublishedText kQwen08b{1024, 3584, 24, 8, 2, 256, 16, 16, 128, 128};
constexpr PublishedText kQwen4b{2560, 9216, 32, 16, 4, 256, 16, 32, 128, 128};
constexpr PublishedText kQwen9b{4096, 12288, 32, 16, 4, 256, 16, 32, 128, 128};
constexpr PublishedText kQwen27b{5120, 17408, 64, 24, 4, 256, 16, 48, 128, 128};
// kev synth's tiny shapes: tiny widths at Kev-4B/9B's, Kev-0.8B's and Kev-27B's depths.
constexpr PublishedText kSynthTiny{64, 96, 32, 4, 2, 16, 2, 4, 8, 8};
constexpr PublishedText kSynthTiny08b{64, 96, 24, 4, 1, 16, 2, 2, 8, 8};
constexpr PublishedText kSynthTiny27b{64, 96, 64, 6, 1, 16, 2, 6, 8, 8};

std::string pin_member_text_settings(const PublishedText& p) {
  std::string types;
  for (int64_t l = 0; l < p.layers; ++l)
    types += std::string(l ? "," : "") +
             ((l + 1) % p.full_every == 0 ? "\"full_attention\"" : "\"linear_attention\"");
  return "\"hidden_size\": " + std::to_string(p.hidden) +
         ", \"intermediate_size\": " + std::to_string(p.intermediate) +
         ", \"num_hidden_layers\": " + std::to_string(p.layers) +
         ", \"num_attention_heads\": " + std::to_string(p.heads) +
         ", \"num_key_value_heads\": " + std::to_string(p.kv_heads) +
         ", \"head_dim\": " + std::to_string(p.head_dim) +
         ", \"linear_num_key_heads\": " + std::to_string(p.linear_key_heads) +
         ", \"linear_num_value_heads\": " + std::to_string(p.linear_value_heads) +
         ", \"linear_key_head_dim\": " + std::to_string(p.linear_key_dim) +
         ", \"linear_value_head_dim\": " + std::to_string(p.linear_value_dim) +
         ", \"layer_types\": [" + types + "]";
}

// A base's config.json (the multimodal layout: text settings under text_config).
BaseTextConfig pin_member_base_config(const PublishedText& p) {
  return parse_base_text_config(
      "{\"model_type\": \"qwen3_5\", \"text_config\": {" + pin_member_text_settings(p) + "}}",
      "base/config.json");
}

// A full-weight checkpoint's config.json (the text model's own, top level).
BaseTextConfig pin_member_full_config(const PublishedText& p) {
  return parse_full_config(
             "{\"model_type\": \"qwen3_5_text\", \"dtype\": \"bfloat16\", "
             "\"vocab_size\": 248320, \"linear_conv_kernel_dim\": 4, " +
                 pin_member_text_settings(p) + "}",
             "checkpoint/config.json")
      .text;
}

std::string pin_member_refusal(const std::string& form, const BaseTextConfig& config,
                               const std::vector<FamilyMember>& family = kev_family()) {
  std::string msg;
  EXPECT_EQ(kind_of([&] { member_from_config(form, config, "dir/config.json", family); }, &msg),
            ErrorKind::kBadInput);
  return msg;
}

TEST(PinMember, PublishedConfigsTellTheirMember) {
  EXPECT_EQ(member_from_config("lora", pin_member_base_config(kQwen08b), "c").model, "kev-0.8b");
  EXPECT_EQ(member_from_config("lora", pin_member_base_config(kQwen4b), "c").model, "kev-4b");
  EXPECT_EQ(member_from_config("lora", pin_member_base_config(kQwen9b), "c").model, "kev-9b");
  // 64 layers of Qwen3.8-27B: full weights are Kev 1.0's Kev-27B, an adapter on that base is
  // the v1-lora release.
  EXPECT_EQ(member_from_config("full", pin_member_full_config(kQwen27b), "c").model, "kev-27b");
  EXPECT_EQ(member_from_config("lora", pin_member_base_config(kQwen27b), "c").model,
            "kev-27b-v1-lora");
}

TEST(PinMember, EveryMembersOwnConfigIsThatMember) {
  for (const auto& m : kev_family())
    EXPECT_EQ(&member_from_config(m.weights, m.config, "c"), &m) << m.model;
}

TEST(PinMember, DepthAloneIsRefusedNamingTheMembersOfThatDepth) {
  // kev synth's tiny shapes have a member's depth but not its sizes: no member, ask.
  std::string msg = pin_member_refusal("lora", pin_member_base_config(kSynthTiny));
  EXPECT_NE(msg.find("cannot tell the family member from dir/config.json (32 layers, hidden size "
                     "64)"),
            std::string::npos)
      << msg;
  EXPECT_NE(msg.find("pass --model kev-4b or --model kev-9b"), std::string::npos) << msg;
  EXPECT_NE(msg.find("kev-0.8b: 24 layers, hidden size 1024"), std::string::npos) << msg;
  msg = pin_member_refusal("lora", pin_member_base_config(kSynthTiny08b));
  EXPECT_NE(msg.find("pass --model kev-0.8b (the member of its depth)"), std::string::npos) << msg;
  msg = pin_member_refusal("full", pin_member_full_config(kSynthTiny27b));
  EXPECT_NE(msg.find("pass --model kev-27b"), std::string::npos) << msg;
  EXPECT_EQ(msg.find("kev-27b-v1-lora"), std::string::npos) << msg;  // another form
}

TEST(PinMember, AnotherFormOrOneSizeOffIsNoMember) {
  // Full weights of a 4B-sized model: no full-weight member of that depth; kev-27b is the one
  // full-weight member there is.
  std::string msg = pin_member_refusal("full", pin_member_full_config(kQwen4b));
  EXPECT_NE(msg.find("pass --model kev-27b"), std::string::npos) << msg;
  EXPECT_EQ(msg.find("its depth"), std::string::npos) << msg;
  PublishedText wider = kQwen4b;
  wider.intermediate += 1;
  msg = pin_member_refusal("lora", pin_member_base_config(wider));
  EXPECT_NE(msg.find("--model kev-4b or --model kev-9b"), std::string::npos) << msg;
  PublishedText other_layout = kQwen4b;  // full attention on every other layer
  other_layout.full_every = 2;
  msg = pin_member_refusal("lora", pin_member_base_config(other_layout));
  EXPECT_NE(msg.find("--model kev-0.8b, --model kev-4b, --model kev-9b or --model "
                     "kev-27b-v1-lora"),
            std::string::npos)
      << msg;
  PublishedText ungated = kQwen4b;
  BaseTextConfig c = pin_member_base_config(ungated);
  c.attn_output_gate = false;
  pin_member_refusal("lora", c);
  EXPECT_EQ(kind_of([&] { member_from_config("", pin_member_base_config(kQwen4b), "c"); }),
            ErrorKind::kBadInput);
}

TEST(PinMember, TwoMembersOfOneBaseAreRefusedNamingBoth) {
  std::vector<FamilyMember> family = kev_family();
  FamilyMember twin = *find_member("kev-4b");
  twin.model = "kev-4b-twin";
  family.push_back(twin);
  std::string msg = pin_member_refusal("lora", pin_member_base_config(kQwen4b), family);
  EXPECT_NE(msg.find("base config of 2 LoRA members; pass --model kev-4b or --model kev-4b-twin"),
            std::string::npos)
      << msg;
  // The other members are still told apart.
  EXPECT_EQ(member_from_config("lora", pin_member_base_config(kQwen9b), "c", family).model,
            "kev-9b");
}

}  // namespace
}  // namespace kev
