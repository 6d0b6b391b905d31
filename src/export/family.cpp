#include "kev/export/family.h"

#include <fmt/format.h>

#include <algorithm>

#include "kev/core/error.h"
#include "kev/core/test_hooks.h"

namespace kev {
namespace {

// The commit of jaredpalmer/kev whose model cards name the 0.8B, 9B and 27B releases.
constexpr const char* kCardsCommit = "0771e6d1832e01cffe7695aaf385eb1625ca4017";

// Kev 1.0's Kev-27B: the Hub main of jaredpalmer/kev-27b at the release, full weights (v2).
constexpr const char* kKev27bRelease = "ef78cc8a34d5f426fb229c52089db189218cfe5c";

// A member's base: its published text config (formats/qwen_config.h) with the output gate.
BaseTextConfig qwen_base_config(std::string_view size) {
  const QwenTextDims* dims = qwen_published_dims(size);
  if (dims == nullptr) fail(ErrorKind::kInternal, "no published config of size {}", size);
  BaseTextConfig c;
  static_cast<QwenTextDims&>(c) = *dims;
  c.attn_output_gate = true;
  return c;
}

FamilyMember member(std::string model, std::string display, std::string base_repo,
                    std::string base_revision, std::string prefix, std::string ckpt_repo,
                    std::string ckpt_revision, std::string ref_revision, std::string_view size) {
  FamilyMember m;
  m.model = std::move(model);
  m.display = std::move(display);
  m.base_repo = std::move(base_repo);
  m.base_revision = std::move(base_revision);
  m.base_revision_prefix = std::move(prefix);
  m.checkpoint_repo = std::move(ckpt_repo);
  m.checkpoint_revision = std::move(ckpt_revision);
  m.reference_repo = "jaredpalmer/kev";
  m.reference_revision = std::move(ref_revision);
  m.config = qwen_base_config(size);
  if (m.model == "kev-27b") m.weights = "full";
  return m;
}

}  // namespace

const std::vector<FamilyMember>& kev_family() {
  static const std::vector<FamilyMember> family = {
      member("kev-0.8b", "Kev-0.8B", "Qwen/Qwen3.5-0.8B-Base", "", "dc7cdfe2",
             "jaredpalmer/kev-0.8b", "9a45d25eb2ab761841196625383fa1dff0e56c1e", kCardsCommit,
             "0.8b"),
      member("kev-4b", "Kev-4B", "Qwen/Qwen3.5-4B-Base", "1001bb4d826a52d1f399e183466143f4da7b741b",
             "", "jaredpalmer/kev-4b", "139fdd94f1b6a6ad80cc15e08fcb99cac885a101", "2074cc44",
             "4b"),
      member("kev-9b", "Kev-9B", "Qwen/Qwen3.5-9B-Base", "", "68c46c4b", "jaredpalmer/kev-9b",
             "b5d8c18e44c60888d138b65cb6507ff0a5a448a0", kCardsCommit, "9b"),
      member("kev-27b", "Kev-27B", "Qwen/Qwen3.8-27B", "", "1d4bf0f2", "jaredpalmer/kev-27b",
             kKev27bRelease, kCardsCommit, "27b"),
      member("kev-27b-v1-lora", "Kev-27B v1 (LoRA)", "Qwen/Qwen3.8-27B", "", "1d4bf0f2",
             "jaredpalmer/kev-27b", "", kCardsCommit, "27b"),
  };
  return family;
}

const FamilyMember* find_member(std::string_view model) {
  for (const auto& m : kev_family())
    if (m.model == model) return &m;
  return nullptr;
}

bool is_member_config(const FamilyMember& m, const BaseTextConfig& c) {
  return c == m.config;
}

bool has_member_layout(const FamilyMember& m, const BaseTextConfig& c) {
  const auto& want = m.config.full_attention;
  const auto& got = c.full_attention;
  if (got == want) return true;
  return test_hooks::pin_depth_prefix() && !got.empty() && got.size() % 4 == 0 &&
         got.size() < want.size() && std::equal(got.begin(), got.end(), want.begin());
}

const std::vector<std::string>& kev_target_modules() {
  static const std::vector<std::string> modules = {
      "q_proj",    "k_proj",      "v_proj",    "o_proj",    "gate_proj", "up_proj",
      "down_proj", "in_proj_qkv", "in_proj_z", "in_proj_a", "in_proj_b", "out_proj"};
  return modules;
}

TargetCounts count_targets(const std::vector<LoraTarget>& targets) {
  TargetCounts c;
  for (const auto& t : targets) {
    if (t.family == "mlp")
      ++c.mlp;
    else if (t.family == "self_attn")
      ++c.attention;
    else if (t.family == "linear_attn")
      ++c.gdn;
    else
      fail(ErrorKind::kInternal, "LoRA target {} has unknown family {}", t.base_name, t.family);
  }
  return c;
}

TargetCounts member_counts(const FamilyMember& m) {
  if (m.weights == "full") return {};  // no adapter: nothing to count
  LoraConfig all;
  all.rank = m.rank;
  all.alpha = m.alpha;
  all.target_modules = kev_target_modules();
  return count_targets(expected_targets(m.config, all));
}

void check_member_counts(const FamilyMember& m, const std::vector<LoraTarget>& targets) {
  const TargetCounts got = count_targets(targets), want = member_counts(m);
  if (got == want) return;
  int64_t full = 0;
  for (bool f : m.config.full_attention) full += f ? 1 : 0;
  fail(ErrorKind::kBadInput,
       "config.json and adapter_config.json define {} LoRA targets ({} MLP, {} attention, {} "
       "GDN); {} has exactly {} ({} MLP, {} attention, {} GDN: {}'s {} layers, {} of them full "
       "attention, with all 12 projections)",
       got.total(), got.mlp, got.attention, got.gdn, m.display, want.total(), want.mlp,
       want.attention, want.gdn, m.base_repo, m.config.layers, full);
}

std::string describe_config(const BaseTextConfig& c) {
  return fmt::format("{} layers, hidden size {}", c.layers, c.hidden);
}

namespace {

std::string as_model_flags(const std::vector<const FamilyMember*>& members) {
  std::string out;
  for (size_t i = 0; i < members.size(); ++i)
    out += fmt::format("{}--model {}",
                       i == 0                    ? ""
                       : i + 1 == members.size() ? " or "
                                                 : ", ",
                       members[i]->model);
  return out;
}

}  // namespace

const FamilyMember& member_from_config(const std::string& form, const BaseTextConfig& config,
                                       const std::string& config_name,
                                       const std::vector<FamilyMember>& family) {
  std::vector<const FamilyMember*> of_form, matches, same_depth;
  for (const auto& m : family) {
    if (m.weights != form) continue;
    of_form.push_back(&m);
    if (is_member_config(m, config)) matches.push_back(&m);
    if (m.config.full_attention == config.full_attention) same_depth.push_back(&m);
  }
  if (matches.size() == 1) return *matches.front();
  const bool full = form == "full";
  if (of_form.empty())
    fail(ErrorKind::kBadInput,
         "cannot tell the family member from {}: no Kev member is a {} checkpoint", config_name,
         form);
  if (!matches.empty())
    fail(ErrorKind::kBadInput,
         "cannot tell the family member from {} ({}): it is the {}config of {} {} members; pass {}",
         config_name, describe_config(config), full ? "" : "base ", matches.size(),
         full ? "full-weight" : "LoRA", as_model_flags(matches));
  std::string known;
  for (const auto* m : of_form)
    known +=
        fmt::format("{}{}: {}", known.empty() ? "" : "; ", m->model, describe_config(m->config));
  fail(ErrorKind::kBadInput,
       "cannot tell the family member from {} ({}): it is no Kev {} member's {}({}); pass {}{}",
       config_name, describe_config(config), full ? "full-weight" : "LoRA",
       full ? "config " : "base ", known, as_model_flags(same_depth.empty() ? of_form : same_depth),
       same_depth.empty()       ? ""
       : same_depth.size() == 1 ? " (the member of its depth)"
                                : " (the members of its depth)");
}

}  // namespace kev
