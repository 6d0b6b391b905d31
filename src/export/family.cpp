#include "kev/export/family.h"

#include <fmt/format.h>

#include "kev/core/error.h"

namespace kev {
namespace {

// The commit of jaredpalmer/kev whose model cards name the 0.8B, 9B and 27B releases.
constexpr const char* kCardsCommit = "0771e6d1832e01cffe7695aaf385eb1625ca4017";

// Kev 1.0's Kev-27B: the Hub main of jaredpalmer/kev-27b at the release, full weights (v2).
constexpr const char* kKev27bRelease = "ef78cc8a34d5f426fb229c52089db189218cfe5c";

struct Dims {
  int64_t hidden, intermediate, layers, heads, kv_heads, head_dim;
  int64_t linear_key_heads, linear_value_heads, linear_key_dim, linear_value_dim;
};

// Qwen3.5 text config: full attention on every fourth layer (layer % 4 == 3), GDN elsewhere.
BaseTextConfig qwen35_config(const Dims& d) {
  BaseTextConfig c;
  c.hidden = d.hidden;
  c.intermediate = d.intermediate;
  c.layers = d.layers;
  c.heads = d.heads;
  c.kv_heads = d.kv_heads;
  c.head_dim = d.head_dim;
  c.linear_key_heads = d.linear_key_heads;
  c.linear_value_heads = d.linear_value_heads;
  c.linear_key_dim = d.linear_key_dim;
  c.linear_value_dim = d.linear_value_dim;
  c.attn_output_gate = true;
  for (int64_t l = 0; l < d.layers; ++l) c.full_attention.push_back(l % 4 == 3);
  return c;
}

FamilyMember member(std::string model, std::string display, std::string base_repo,
                    std::string base_revision, std::string prefix, std::string ckpt_repo,
                    std::string ckpt_revision, std::string ref_revision, const Dims& d) {
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
  m.config = qwen35_config(d);
  if (m.model == "kev-27b") m.weights = "full";
  return m;
}

}  // namespace

const std::vector<FamilyMember>& kev_family() {
  static const std::vector<FamilyMember> family = {
      member("kev-0.8b", "Kev-0.8B", "Qwen/Qwen3.5-0.8B-Base", "", "dc7cdfe2",
             "jaredpalmer/kev-0.8b", "9a45d25eb2ab761841196625383fa1dff0e56c1e", kCardsCommit,
             {1024, 3584, 24, 8, 2, 256, 16, 16, 128, 128}),
      member("kev-4b", "Kev-4B", "Qwen/Qwen3.5-4B-Base", "1001bb4d826a52d1f399e183466143f4da7b741b",
             "", "jaredpalmer/kev-4b", "139fdd94f1b6a6ad80cc15e08fcb99cac885a101", "2074cc44",
             {2560, 9216, 32, 16, 4, 256, 16, 32, 128, 128}),
      member("kev-9b", "Kev-9B", "Qwen/Qwen3.5-9B-Base", "", "68c46c4b", "jaredpalmer/kev-9b",
             "b5d8c18e44c60888d138b65cb6507ff0a5a448a0", kCardsCommit,
             {4096, 12288, 32, 16, 4, 256, 16, 32, 128, 128}),
      member("kev-27b", "Kev-27B", "Qwen/Qwen3.8-27B", "", "1d4bf0f2", "jaredpalmer/kev-27b",
             kKev27bRelease, kCardsCommit, {5120, 17408, 64, 24, 4, 256, 16, 48, 128, 128}),
      member("kev-27b-v1-lora", "Kev-27B v1 (LoRA)", "Qwen/Qwen3.8-27B", "", "1d4bf0f2",
             "jaredpalmer/kev-27b", "", kCardsCommit,
             {5120, 17408, 64, 24, 4, 256, 16, 48, 128, 128}),
  };
  return family;
}

const FamilyMember* find_member(std::string_view model) {
  for (const auto& m : kev_family())
    if (m.model == model) return &m;
  return nullptr;
}

bool is_member_config(const FamilyMember& m, const BaseTextConfig& c) {
  const BaseTextConfig& b = m.config;
  return c.layers == b.layers && c.full_attention == b.full_attention && c.hidden == b.hidden &&
         c.intermediate == b.intermediate && c.heads == b.heads && c.kv_heads == b.kv_heads &&
         c.head_dim == b.head_dim && c.linear_key_heads == b.linear_key_heads &&
         c.linear_value_heads == b.linear_value_heads && c.linear_key_dim == b.linear_key_dim &&
         c.linear_value_dim == b.linear_value_dim && c.attn_output_gate == b.attn_output_gate;
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
