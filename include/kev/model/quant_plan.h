// Which rows of which big projection are reduced to 8, 5 (q5 or q5z) or 4 bits (q4 or q4z), for the
// int8 precision mode (reduced at load time) and for quantized bundles (`kev quantize`, reduced on
// disk). One selection language for both: a spec is a comma list of `class[@first-last]` (layers
// 0-based, inclusive; default every layer), the classes attn_q, attn_k, attn_v, attn_o, gdn_q,
// gdn_k, gdn_v (the query, key and value rows of a GDN in_proj_qkv), gdn_z, gdn_out, mlp_gate,
// mlp_up, mlp_down; `all` stands for every class, `gdn_qkv` for its three row classes, `none` (or
// "") for nothing.
//
// Contract: quantization_plan lists every big projection of the config (the tensors
// projection_names gives, in layer order) with its rows cut into parts of one kind each, in row
// order, covering [0, rows) exactly; rows no spec selects are kExact. A row class selected by
// both specs, an unknown class or a layer outside the model is refused (Error kBadInput, naming
// `what`, the flag or variable the spec came from). Pure functions of their arguments.
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "kev/model/config.h"

namespace kev {

enum class WeightKind { kExact, kQ8, kQ4, kQ5, kQ4z, kQ5z };
const char* weight_kind_name(WeightKind k);  // "bf16", "q8", "q4", "q5", "q4z", "q5z"

// How a quantized kind stores a row of `blocks` 32-value blocks (docs/bundle-format.md): bytes
// of values per block, scales per row (one per block; q4z and q5z one per 8 blocks) and bytes per
// scale (F32 for q8, F16 otherwise). The one home of these sizes for the writer, loader and packer.
struct StoredLayout {
  int64_t block_bytes = 0, scales = 0, scale_bytes = 0;
};
StoredLayout stored_layout(WeightKind k, int64_t blocks);  // k must not be kExact
// Every quantized kind, in the order ModelWeights::stored_kinds joins them.
inline constexpr WeightKind kQuantizedKinds[] = {WeightKind::kQ4, WeightKind::kQ4z, WeightKind::kQ5,
                                                 WeightKind::kQ5z, WeightKind::kQ8};
// The quantized kind a part's suffix names ("q8", "q4", "q5", "q4z", "q5z"); kExact for any
// other name, "bf16" included.
WeightKind quantized_kind_named(const std::string& name);

// A stored part's name after its projection's `W@` (docs/bundle-format.md): `<r0>-<r1>.<kind>`.
struct PartName {
  int64_t row0 = 0, row1 = 0;
  std::string kind;  // as named: "bf16", a quantized kind's name, or one this kev does not know
};
// Contract: parses `suffix` strictly. r0 and r1 are decimal digits only (no sign, no space, no
// leading zero but "0" itself, at most 18 digits), with 0 <= r0 < r1 <= rows; kind is 1 to 7
// lowercase ASCII letters or digits, known or not (the caller says which it knows). nullopt for
// anything else. Pure; throws nothing but std::bad_alloc.
std::optional<PartName> parse_part_name(std::string_view suffix, int64_t rows);

// The row classes a spec names, in the order of a LayerSelection's index.
inline constexpr int kProjectionClasses = 12;
inline constexpr const char* kProjectionClassNames[kProjectionClasses] = {
    "attn_q", "attn_k", "attn_v",  "attn_o",   "gdn_q",  "gdn_k",
    "gdn_v",  "gdn_z",  "gdn_out", "mlp_gate", "mlp_up", "mlp_down"};

// Per class (kProjectionClassNames' order), the layers a spec selects (each `layers` long).
struct LayerSelection {
  std::vector<bool> layers[kProjectionClasses];
  bool has(int64_t layer, int cls) const {
    const auto& l = layers[cls];
    return layer >= 0 && static_cast<size_t>(layer) < l.size() && l[static_cast<size_t>(layer)];
  }
};
// Contract: parses `spec` strictly. Entries are split at every ','; an empty entry or `none`
// selects nothing; any other is `class` (every layer) or `class@first-last`, class one of
// kProjectionClassNames, `all` or `gdn_qkv`, first and last decimal digits only (no sign, no
// space, no leading zero but "0" itself, at most 18 digits) with 0 <= first <= last < layers.
// Anything else throws Error kBadInput naming `what` and the entry, the first bad entry's range
// ("expected class@first-last within layers 0-N", checked before its class) or class ("unknown
// projection class"). Pure otherwise.
LayerSelection parse_selection(std::string_view spec, int64_t layers, std::string_view what);

struct RowPart {
  int64_t row0 = 0, row1 = 0;
  WeightKind kind = WeightKind::kExact;
};

struct ProjectionPlan {
  std::string name;  // the tensor name without prefix, e.g. "layers.3.mlp.up_proj.weight"
  int64_t layer = 0, rows = 0, cols = 0;
  std::vector<RowPart> parts;
  bool reduced() const { return parts.size() != 1 || parts[0].kind != WeightKind::kExact; }
};

struct QuantSpecs {
  std::string q8, q5, q4, q4z, q5z;  // the rows stored (or run) at 8, 5, 4 bits, as q4z and q5z
  std::string q8_what = "--q8", q5_what = "--q5", q4_what = "--q4", q4z_what = "--q4z",
              q5z_what = "--q5z";  // what errors call them
  // One selection of rows (at "8 bits": the load-time modes' reduced rows), errors naming `what`.
  static QuantSpecs only(std::string spec, std::string what) {
    QuantSpecs s;
    s.q8 = std::move(spec);
    s.q8_what = std::move(what);
    return s;
  }
};

std::vector<ProjectionPlan> quantization_plan(const ModelConfig& c, const QuantSpecs& specs);

// Every projection of layers [first, layers) except the GDN query and key rows ("none" where
// first >= layers).
std::string late_layers_spec(int64_t first, int64_t layers);
// The int8 mode's default selection (docs/notes/int8-study.md): late_layers_spec from the second
// quarter of the layers on (rounded up).
std::string int8_default_spec(int64_t layers);
// The bf16 mode's (the same notes, "bf16's selection"): every projection of every layer except the
// GDN query and key rows.
std::string bf16_default_spec();

}  // namespace kev
