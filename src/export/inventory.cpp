#include "kev/export/inventory.h"

#include <algorithm>
#include <initializer_list>
#include <map>
#include <set>

#include "kev/core/error.h"

namespace kev {
namespace {

struct Family {
  const char* name;
  enum { kAll, kFull, kLinear } layers;
  std::vector<std::string> modules;
};

const std::vector<Family>& families() {
  static const std::vector<Family> f = {
      {"mlp", Family::kAll, {"gate_proj", "up_proj", "down_proj"}},
      {"self_attn", Family::kFull, {"q_proj", "k_proj", "v_proj", "o_proj"}},
      {"linear_attn",
       Family::kLinear,
       {"in_proj_qkv", "in_proj_z", "in_proj_a", "in_proj_b", "out_proj"}},
  };
  return f;
}

std::string join_some(const std::vector<std::string>& items, size_t limit = 4) {
  std::string s;
  for (size_t i = 0; i < items.size() && i < limit; ++i) s += (i ? ", " : "") + items[i];
  if (items.size() > limit) s += fmt::format(" and {} more", items.size() - limit);
  return s;
}

int64_t product(std::initializer_list<int64_t> factors) {
  int64_t p = 1;
  for (int64_t f : factors)
    if (__builtin_mul_overflow(p, f, &p))
      fail(ErrorKind::kBadInput, "config.json sizes overflow a projection shape");
  return p;
}

int64_t sum(int64_t a, int64_t b) {
  int64_t s = 0;
  if (__builtin_add_overflow(a, b, &s))
    fail(ErrorKind::kBadInput, "config.json sizes overflow a projection shape");
  return s;
}

// [out, in] of the base weight for one projection, as in docs/reference.md's tensor list.
std::vector<int64_t> base_shape(const BaseTextConfig& c, const std::string& module) {
  const int64_t h = c.hidden, inter = c.intermediate;
  const int64_t q = product({c.heads, c.head_dim, c.attn_output_gate ? 2 : 1}),
                kv = product({c.kv_heads, c.head_dim}), attn = product({c.heads, c.head_dim});
  const int64_t key = product({c.linear_key_heads, c.linear_key_dim}),
                value = product({c.linear_value_heads, c.linear_value_dim});
  if (module == "gate_proj" || module == "up_proj") return {inter, h};
  if (module == "down_proj") return {h, inter};
  if (module == "q_proj") return {q, h};
  if (module == "k_proj" || module == "v_proj") return {kv, h};
  if (module == "o_proj") return {h, attn};
  if (module == "in_proj_qkv") return {sum(product({2, key}), value), h};
  if (module == "in_proj_z") return {value, h};
  if (module == "in_proj_a" || module == "in_proj_b") return {c.linear_value_heads, h};
  if (module == "out_proj") return {h, value};
  fail(ErrorKind::kInternal, "no shape rule for module {}", module);
}

}  // namespace

std::vector<LoraTarget> expected_targets(const BaseTextConfig& config, const LoraConfig& lora) {
  std::map<std::string, const Family*> family_of;
  for (const auto& f : families())
    for (const auto& m : f.modules) family_of[m] = &f;
  for (const auto& m : lora.target_modules)
    if (!family_of.count(m))
      fail(ErrorKind::kUnsupported,
           "adapter_config.json targets module \"{}\", which is not a Qwen3.5 text projection "
           "this exporter knows how to merge",
           m);
  std::vector<LoraTarget> out;
  for (int64_t layer = 0; layer < config.layers; ++layer) {
    bool full = config.full_attention[static_cast<size_t>(layer)];
    for (const auto& f : families()) {
      if ((f.layers == Family::kFull && !full) || (f.layers == Family::kLinear && full)) continue;
      for (const auto& m : f.modules) {
        if (std::find(lora.target_modules.begin(), lora.target_modules.end(), m) ==
            lora.target_modules.end())
          continue;
        std::string stem = fmt::format("layers.{}.{}.{}", layer, f.name, m);
        out.push_back({"model.language_model." + stem + ".weight",
                       "base_model.model." + stem + ".lora_A.weight",
                       "base_model.model." + stem + ".lora_B.weight", f.name, layer,
                       base_shape(config, m)});
      }
    }
  }
  return out;
}

void check_adapter(const std::vector<LoraTarget>& targets, const SafetensorsView& adapter,
                   const BaseTensorLookup& base, int64_t rank, const std::string& name) {
  std::set<std::string> expected;
  for (const auto& t : targets) {
    expected.insert(t.a_name);
    expected.insert(t.b_name);
  }
  std::vector<std::string> extra, missing, problems;
  for (const auto& t : adapter.tensors()) {
    if (expected.count(t.name)) continue;
    if (t.name.find("lora_magnitude_vector") != std::string::npos)
      fail(ErrorKind::kUnsupported, "{} holds {}, a DoRA magnitude; DoRA adapters cannot be merged",
           name, t.name);
    if (t.name.ends_with(".bias"))
      fail(ErrorKind::kUnsupported,
           "{} holds {}, a LoRA bias; only bias-free adapters can be merged", name, t.name);
    extra.push_back(t.name);
  }
  for (const auto& n : expected)
    if (!adapter.find(n)) missing.push_back(n);
  if (!missing.empty() || !extra.empty()) {
    std::string msg = fmt::format(
        "{} does not match the {} LoRA targets that config.json and "
        "adapter_config.json define ({} adapter tensors expected, {} found)",
        name, targets.size(), expected.size(), adapter.tensors().size());
    if (!missing.empty()) msg += fmt::format("; missing: {}", join_some(missing));
    if (!extra.empty()) msg += fmt::format("; unexpected: {}", join_some(extra));
    fail(ErrorKind::kBadInput, "{}", msg);
  }
  for (const auto& t : targets) {
    const TensorInfo* w = base(t.base_name);
    if (!w)
      fail(ErrorKind::kBadInput, "LoRA target {} has no base weight in the base index",
           t.base_name);
    if (w->dtype != DType::kBF16 || w->shape.size() != 2)
      fail(ErrorKind::kUnsupported, "base weight {} is {} {}; LoRA targets must be 2-D BF16",
           t.base_name, dtype_name(w->dtype), shape_string(w->shape));
    if (w->shape != t.base_shape || w->shape[0] <= 0 || w->shape[1] <= 0)
      fail(ErrorKind::kBadInput,
           "base weight {} has shape {} but config.json implies {}; every LoRA target must have "
           "the projection's full, non-empty shape",
           t.base_name, shape_string(w->shape), shape_string(t.base_shape));
    const TensorInfo& a = adapter.get(t.a_name);
    const TensorInfo& b = adapter.get(t.b_name);
    for (const TensorInfo* x : {&a, &b})
      if (x->dtype != DType::kF32)
        fail(ErrorKind::kBadInput, "{}: {} is {}; LoRA factors must be F32", name, x->name,
             dtype_name(x->dtype));
    std::vector<int64_t> want_a = {rank, w->shape[1]}, want_b = {w->shape[0], rank};
    if (a.shape != want_a)
      fail(ErrorKind::kBadInput, "{}: {} has shape {} but base {} {} with rank {} needs {}", name,
           a.name, shape_string(a.shape), t.base_name, shape_string(w->shape), rank,
           shape_string(want_a));
    if (b.shape != want_b)
      fail(ErrorKind::kBadInput, "{}: {} has shape {} but base {} {} with rank {} needs {}", name,
           b.name, shape_string(b.shape), t.base_name, shape_string(w->shape), rank,
           shape_string(want_b));
  }
}

}  // namespace kev
