// The Kev family as Kev 1.0 released it: Kev-0.8B, Kev-4B and Kev-9B, each a LoRA adapter (all
// twelve dense and GDN projections, rank 16, alpha 32) plus a pointer head on a
// Qwen3.5-architecture base; Kev-27B (v2), full bf16 weights of a fine-tuned Qwen3.8-27B plus the
// head (weights "full": no adapter, no target inventory); and Kev-27B v1 (the Hub tag v1-lora,
// model "kev-27b-v1-lora"), a LoRA adapter on Qwen3.8-27B.
//
// Each member carries the published text config of its base (layer count, layer kinds, sizes).
// The LoRA inventory a member's release must have is derived from that config with
// expected_targets (the same function that derives an export's inventory from the pinned
// config.json and adapter_config.json), never written down as a constant: Kev-0.8B 186,
// Kev-4B 248, Kev-9B 248, Kev-27B 496 (recipes/README.md shows the arithmetic and sources).
//
// A revision the project could not confirm as a full 40-digit commit is empty here and null in
// recipes/<model>.json; `kev pin` then takes it from a Hugging Face cache snapshot path or
// from --base-revision / --checkpoint-revision, and refuses otherwise.
#pragma once
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "kev/export/configs.h"
#include "kev/export/inventory.h"

namespace kev {

struct FamilyMember {
  std::string model;                     // "kev-4b": the recipe's "model"
  std::string weights = "lora";          // "lora" or "full" (the recipe's "weights")
  std::string display;                   // "Kev-4B"
  std::string base_repo, base_revision;  // revision: 40 hex, or empty when not confirmed
  std::string base_revision_prefix;      // short hash a model card names where no full one is known
  std::string checkpoint_repo, checkpoint_revision;  // revision: 40 hex or empty
  std::string reference_repo, reference_revision;
  int64_t rank = 16;
  double alpha = 32;
  BaseTextConfig config;  // the base's published text settings
};

// In size order: kev-0.8b, kev-4b, kev-9b, kev-27b, kev-27b-v1-lora.
const std::vector<FamilyMember>& kev_family();

// nullptr for a model outside the family.
const FamilyMember* find_member(std::string_view model);

// Whether `config` is the member's base text config: the same layer count and layer kinds and
// every size equal (hidden, intermediate, attention and GDN heads and head sizes, the output
// gate). A download of the member's base (LoRA) or of its full weights holds exactly that.
bool is_member_config(const FamilyMember& member, const BaseTextConfig& config);

// Whether `config` has the member's layer kinds (layer count and which are full attention):
// what a checkpoint of the member must have whatever --model says. In a test build with
// KEV_PIN_DEPTH_PREFIX=1 (kev/core/test_hooks.h), also the first N of them, N a multiple of 4
// and fewer than the member's: a prefix exported at real dimensions to be measured.
bool has_member_layout(const FamilyMember& member, const BaseTextConfig& config);

// The member a checkpoint of `form` ("lora" or "full", checkpoint_form_from_files) is, given the
// text config of the backbone it runs on (`config_name` names that file in messages): the one
// member of `family` with that weights form whose base config is exactly `config`
// (is_member_config). None or several: Error kBadInput, one sentence naming the candidates (the
// members of that form at the config's depth where there are any, else all of that form) and
// saying to pass --model.
const FamilyMember& member_from_config(const std::string& form, const BaseTextConfig& config,
                                       const std::string& config_name,
                                       const std::vector<FamilyMember>& family = kev_family());

// "N layers, hidden size H", for messages.
std::string describe_config(const BaseTextConfig& config);

// The twelve projections every released Kev adapter names in target_modules.
const std::vector<std::string>& kev_target_modules();

struct TargetCounts {
  int64_t mlp = 0, attention = 0, gdn = 0;
  int64_t total() const { return mlp + attention + gdn; }
  bool operator==(const TargetCounts&) const = default;
};
TargetCounts count_targets(const std::vector<LoraTarget>& targets);

// What the member's release must hold: expected_targets(member.config, kev_target_modules()).
TargetCounts member_counts(const FamilyMember& member);

// Refuses (Error kBadInput) targets whose per-family counts differ from member_counts, naming
// both and how the member's numbers follow from its base config.
void check_member_counts(const FamilyMember& member, const std::vector<LoraTarget>& targets);

}  // namespace kev
