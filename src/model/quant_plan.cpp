#include "kev/model/quant_plan.h"

#include <fmt/format.h>

#include <algorithm>
#include <charconv>
#include <optional>
#include <string_view>
#include <system_error>
#include <tuple>
#include <utility>

#include "kev/core/error.h"
#include "kev/cpu/matrix.h"

namespace kev {
namespace {

enum Class {
  kAttnQ,
  kAttnK,
  kAttnV,
  kAttnO,
  kGdnQ,
  kGdnK,
  kGdnV,
  kGdnZ,
  kGdnOut,
  kMlpGate,
  kMlpUp,
  kMlpDown,
  kClasses
};
static_assert(kClasses == kProjectionClasses);

// A count: decimal digits only, no sign or space, no leading zero but "0" itself, at most 18
// digits (so it fits int64_t with room); nullopt otherwise.
std::optional<int64_t> parse_count(std::string_view s) {
  if (s.empty() || s.size() > 18 || (s.size() > 1 && s[0] == '0')) return std::nullopt;
  uint64_t v = 0;  // unsigned: from_chars takes no sign, space or prefix
  const auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (ec != std::errc() || end != s.data() + s.size()) return std::nullopt;
  return static_cast<int64_t>(v);
}

// `first-last` (parse_count each, split at the first '-'); nullopt where malformed.
std::optional<std::pair<int64_t, int64_t>> parse_range(std::string_view s) {
  const size_t dash = s.find('-');
  if (dash == std::string_view::npos) return std::nullopt;
  const std::optional<int64_t> a = parse_count(s.substr(0, dash)),
                               b = parse_count(s.substr(dash + 1));
  if (!a || !b) return std::nullopt;
  return std::pair{*a, *b};
}

}  // namespace

std::optional<PartName> parse_part_name(std::string_view suffix, int64_t rows) {
  const size_t dot = suffix.find('.');
  if (dot == std::string_view::npos) return std::nullopt;
  const auto range = parse_range(suffix.substr(0, dot));
  const std::string_view kind = suffix.substr(dot + 1);
  if (!range || range->first >= range->second || range->second > rows) return std::nullopt;
  if (kind.empty() || kind.size() > 7) return std::nullopt;
  for (char c : kind)
    if (!((c >= 'a' && c <= 'z') || (c >= '0' && c <= '9'))) return std::nullopt;
  return PartName{range->first, range->second, std::string(kind)};
}

LayerSelection parse_selection(std::string_view spec, int64_t layers, std::string_view what) {
  LayerSelection s;
  for (auto& l : s.layers) l.assign(static_cast<size_t>(std::max<int64_t>(layers, 0)), false);
  for (size_t begin = 0; begin <= spec.size();) {
    size_t end = spec.find(',', begin);
    if (end == std::string_view::npos) end = spec.size();
    const std::string_view entry = spec.substr(begin, end - begin);
    begin = end + 1;
    if (entry.empty() || entry == "none") continue;
    const size_t at = entry.find('@');
    const std::string_view name = entry.substr(0, at);
    int64_t first = 0, last = layers - 1;
    if (at != std::string_view::npos) {
      const auto range = parse_range(entry.substr(at + 1));
      if (!range || range->first > range->second || range->second >= layers)
        fail(ErrorKind::kBadInput, "{} entry '{}': expected class@first-last within layers 0-{}",
             what, entry, layers - 1);
      std::tie(first, last) = *range;
    }
    bool found = false;
    for (int c = 0; c < kClasses; ++c) {
      const bool qkv = c >= kGdnQ && c <= kGdnV && name == "gdn_qkv";
      if (name != "all" && !qkv && name != kProjectionClassNames[c]) continue;
      found = true;
      for (int64_t l = first; l <= last; ++l) s.layers[c][static_cast<size_t>(l)] = true;
    }
    if (!found) fail(ErrorKind::kBadInput, "{}: unknown projection class '{}'", what, name);
  }
  return s;
}

const char* weight_kind_name(WeightKind k) {
  switch (k) {
    case WeightKind::kQ8:
      return "q8";
    case WeightKind::kQ4:
      return "q4";
    case WeightKind::kQ5:
      return "q5";
    case WeightKind::kQ4z:
      return "q4z";
    case WeightKind::kQ5z:
      return "q5z";
    default:
      return "bf16";
  }
}

WeightKind quantized_kind_named(const std::string& name) {
  for (WeightKind k : kQuantizedKinds)
    if (name == weight_kind_name(k)) return k;
  return WeightKind::kExact;
}

StoredLayout stored_layout(WeightKind k, int64_t blocks) {
  switch (k) {
    case WeightKind::kQ8:
      return {kQuantBlock, blocks, 4};
    case WeightKind::kQ4:
      return {kQuantBlock / 2, blocks, 2};
    case WeightKind::kQ5:
      return {kQuantBlock / 2 + 4, blocks, 2};
    case WeightKind::kQ4z:
      return {kQ4zBlockBytes, (blocks + kFittedSuperBlock - 1) / kFittedSuperBlock, 2};
    case WeightKind::kQ5z:
      return {kQ5zBlockBytes, (blocks + kFittedSuperBlock - 1) / kFittedSuperBlock, 2};
    default:
      fail(ErrorKind::kInternal, "stored_layout: {} is not a quantized kind", weight_kind_name(k));
  }
}

// Every projection of the first quarter of the layers (rounded up) and the GDN query and key
// rows stay exact: on the synthetic models, one class or one layer at a time, those were the
// sensitive ones (a layer's error is relative to its own output, large early on against the
// residual stream and carried through every later layer; GDN queries and keys are L2-normalised
// per head, which turns a small head's absolute error into a large relative one).
std::string int8_default_spec(int64_t layers) {
  return late_layers_spec((layers + 3) / 4, layers);
}

std::string late_layers_spec(int64_t first, int64_t layers) {
  if (first >= layers) return "none";
  std::string spec;
  for (int c = 0; c < kClasses; ++c) {
    if (c == kGdnQ || c == kGdnK) continue;
    spec += fmt::format("{}{}@{}-{}", spec.empty() ? "" : ",", kProjectionClassNames[c], first,
                        layers - 1);
  }
  return spec;
}

std::string bf16_default_spec() {
  std::string spec;
  for (int c = 0; c < kClasses; ++c)
    if (c != kGdnQ && c != kGdnK)
      spec += fmt::format("{}{}", spec.empty() ? "" : ",", kProjectionClassNames[c]);
  return spec;
}

std::vector<ProjectionPlan> quantization_plan(const ModelConfig& c, const QuantSpecs& specs) {
  const LayerSelection q8 = parse_selection(specs.q8, c.layers, specs.q8_what);
  const LayerSelection q4 = parse_selection(specs.q4, c.layers, specs.q4_what);
  const LayerSelection q5 = parse_selection(specs.q5, c.layers, specs.q5_what);
  const LayerSelection q4z = parse_selection(specs.q4z, c.layers, specs.q4z_what);
  const LayerSelection q5z = parse_selection(specs.q5z, c.layers, specs.q5z_what);
  std::vector<ProjectionPlan> plans;
  // parts: (class, rows) in row order; consecutive rows of one kind form one part.
  auto add = [&](int64_t layer, std::string name, int64_t cols,
                 std::initializer_list<std::pair<int, int64_t>> parts) {
    ProjectionPlan p;
    p.name = fmt::format("layers.{}.{}", layer, name);
    p.layer = layer;
    p.cols = cols;
    for (auto [cls, n] : parts) {
      const std::pair<const LayerSelection*, const std::string*> by_kind[] = {
          {&q8, &specs.q8_what},
          {&q5, &specs.q5_what},
          {&q4, &specs.q4_what},
          {&q4z, &specs.q4z_what},
          {&q5z, &specs.q5z_what}};
      const WeightKind kinds[] = {WeightKind::kQ8, WeightKind::kQ5, WeightKind::kQ4,
                                  WeightKind::kQ4z, WeightKind::kQ5z};
      WeightKind kind = WeightKind::kExact;
      const std::string* chosen = nullptr;
      for (int i = 0; i < 5; ++i) {
        if (!by_kind[i].first->has(layer, cls)) continue;
        if (chosen)
          fail(ErrorKind::kBadInput, "{} and {} both select {} of layer {}", *chosen,
               *by_kind[i].second, kProjectionClassNames[cls], layer);
        chosen = by_kind[i].second;
        kind = kinds[i];
      }
      if (!p.parts.empty() && p.parts.back().kind == kind)
        p.parts.back().row1 += n;
      else
        p.parts.push_back({p.rows, p.rows + n, kind});
      p.rows += n;
    }
    plans.push_back(std::move(p));
  };
  const int64_t h = c.hidden, hd = c.head_dim, qk = c.linear_key_heads * c.linear_key_dim;
  const int64_t vt = c.lin_v_total();
  for (int64_t l = 0; l < c.layers; ++l) {
    if (c.full_attention[static_cast<size_t>(l)]) {
      add(l, "self_attn.q_proj.weight", h, {{kAttnQ, c.heads * hd * 2}});
      add(l, "self_attn.k_proj.weight", h, {{kAttnK, c.kv_heads * hd}});
      add(l, "self_attn.v_proj.weight", h, {{kAttnV, c.kv_heads * hd}});
      add(l, "self_attn.o_proj.weight", c.heads * hd, {{kAttnO, h}});
    } else {
      add(l, "linear_attn.in_proj_qkv.weight", h, {{kGdnQ, qk}, {kGdnK, qk}, {kGdnV, vt}});
      add(l, "linear_attn.in_proj_z.weight", h, {{kGdnZ, vt}});
      add(l, "linear_attn.out_proj.weight", vt, {{kGdnOut, h}});
    }
    add(l, "mlp.gate_proj.weight", h, {{kMlpGate, c.intermediate}});
    add(l, "mlp.up_proj.weight", h, {{kMlpUp, c.intermediate}});
    add(l, "mlp.down_proj.weight", c.intermediate, {{kMlpDown, h}});
  }
  return plans;
}

}  // namespace kev
