#include "kev/formats/checkpoint_fields.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <iterator>
#include <string_view>

#include "kev/core/error.h"

namespace kev {
namespace {

using Json = nlohmann::json;
using ManifestJson = nlohmann::ordered_json;  // manifests keep their key order (json_strict.h)

// One inference field: its name, the values kev implements (as Python and as JSON spell them)
// and why the rest is refused.
struct Field {
  const char* key;
  const char* python;  // what head.pt may hold
  const char* json;    // what a manifest may hold
  const char* why;
};

constexpr Field kFields[] = {
    {"option_isolation", "False", "false",
     "isolated option spans, each reading only the state, its instruction and itself with "
     "positions restarting per span, need an encoding and attention mask kev does not "
     "implement"},
    {"special_embeddings", "False", "false",
     "trained delimiter embeddings, PEFT trainable tokens, replace rows of the embedding matrix, "
     "which kev does not apply"},
    {"weights", "\"lora\" or \"full\"", "\"lora\" or \"full\"",
     "a checkpoint is either a LoRA adapter on a pinned base or a fully fine-tuned backbone "
     "shipped as its own shards"},
    {"weights_dtype", "\"fp32\" or \"bf16\"", "\"fp32\" or \"bf16\"",
     "both are merged alike, one rounding of W + scale * B A to BF16, and no other weight "
     "format is implemented"},
    {"multimodal", "False", "false", "kev scores text decisions and runs no vision input"},
    {"quantization", "None", "null", "kev merges and runs unquantized BF16 weights"},
    {"trainable_token_indices", "None", "null",
     "trained token embeddings replace rows of the embedding matrix, which kev does not apply"},
};

const Field& field(std::string_view key) {
  for (const Field& f : kFields)
    if (key == f.key) return f;
  fail(ErrorKind::kInternal, "no field rule for {}", key);
}

std::string shown(const PyValue& v);

// A small container of plain values, spelled as Python would; empty if v is anything else.
std::string shown_container(const PyValue& v) {
  std::string out;
  auto plain = [](const PyValue& x) { return x.v.index() <= 4; };  // None..str
  if (const PyDict* d = v.as_dict()) {
    if (d->size() > 8) return {};
    for (const auto& [k, x] : *d) {
      if (!plain(k) || !plain(x)) return {};
      out += (out.empty() ? "{" : ", ") + shown(k) + ": " + shown(x);
    }
    return out.empty() ? "{}" : out + "}";
  }
  if (auto* l = std::get_if<PyList>(&v.v)) {
    if (l->size() > 8) return {};
    for (const auto& x : *l) {
      if (!plain(x)) return {};
      out += (out.empty() ? "[" : ", ") + shown(x);
    }
    return out.empty() ? "[]" : out + "]";
  }
  return {};
}

// A value for a message, as Python would print it; large or nested containers are named.
std::string shown(const PyValue& v) {
  if (v.is_none()) return "None";
  if (auto* b = std::get_if<bool>(&v.v)) return *b ? "True" : "False";
  if (auto* i = std::get_if<int64_t>(&v.v)) return std::to_string(*i);
  if (auto* d = std::get_if<double>(&v.v)) {  // 4.0, not 4: a float, as Python shows it
    std::string f = fmt::format("{}", *d);
    return f.find_first_of(".ein") == std::string::npos ? f + ".0" : f;
  }
  if (const std::string* s = v.as_string()) {
    std::string t = s->size() > 60 ? s->substr(0, 60) + "..." : *s;
    return Json(t).dump(-1, ' ', false, Json::error_handler_t::replace);
  }
  std::string small = shown_container(v);
  return small.empty() ? "a " + v.type_name() : small;
}

// Whether v nests at most `depth` containers deep (checked without unbounded recursion).
bool shallow(const ManifestJson& v, int depth) {
  if (v.is_primitive()) return true;
  if (depth == 0) return false;
  return std::all_of(v.begin(), v.end(),
                     [&](const ManifestJson& x) { return shallow(x, depth - 1); });
}

// A JSON value for a message, shortened; deeply nested containers are named (dump() recurses).
std::string shown(const ManifestJson& v) {
  if (!shallow(v, 2)) return std::string("an ") + v.type_name();  // "an object", "an array"
  std::string s = v.dump(-1, ' ', false, ManifestJson::error_handler_t::replace);
  return s.size() > 80 ? s.substr(0, 80) + "..." : s;
}

bool is_false(const PyValue& v) {
  auto* b = std::get_if<bool>(&v.v);
  return b && !*b;
}

[[noreturn]] void refuse_head_field(const std::string& name, const std::string& key,
                                    const PyValue& value) {
  const Field& f = field(key);
  fail(ErrorKind::kUnsupported, "{}: \"{}\" is {}; kev supports only {}: {}", name, key,
       shown(value), f.python, f.why);
}

std::string known_head_keys() {
  std::string s = "head, temperature, head_dim, lora, base, base_revision";
  for (const Field& f : kFields)
    if (std::string_view(f.key) != "trainable_token_indices") s += std::string(", ") + f.key;
  s += "; provenance";
  const char* sep = ": ";
  for (const char* p : kProvenanceKeys) {
    s += sep + std::string(p);
    sep = ", ";
  }
  return s;
}

bool is_provenance(const std::string& key) {
  return std::any_of(std::begin(kProvenanceKeys), std::end(kProvenanceKeys),
                     [&](const char* p) { return key == p; });
}

}  // namespace

CheckpointFields read_checkpoint_fields(const PyValue& root, const std::string& name) {
  const PyDict* d = root.as_dict();
  if (!d) fail(ErrorKind::kBadInput, "{}: the top level is {}, not a dict", name, root.type_name());
  CheckpointFields f;
  for (const auto& [k, v] : *d) {
    const std::string* key = k.as_string();
    if (!key) fail(ErrorKind::kBadInput, "{}: a top-level key is {}, not a str", name, shown(k));
    if (*key == "head" || *key == "temperature" || *key == "head_dim" || is_provenance(*key))
      continue;  // the head and its settings are validated by extract_head
    if (*key == "lora") {
      auto* rank = std::get_if<int64_t>(&v.v);
      if (!rank || *rank < 0)
        fail(ErrorKind::kBadInput, "{}: \"lora\" is {}; it must be the adapter rank (an int >= 0)",
             name, shown(v));
      f.lora = *rank;
    } else if (*key == "base") {
      if (!v.as_string())
        fail(ErrorKind::kBadInput, "{}: \"base\" is {}; it must name the base model (a str)", name,
             shown(v));
    } else if (*key == "base_revision") {
      if (!v.as_string() && !v.is_none())
        fail(ErrorKind::kBadInput, "{}: \"base_revision\" is {}; it must be a str or None", name,
             shown(v));
    } else if (*key == "option_isolation" || *key == "special_embeddings" || *key == "multimodal") {
      if (!is_false(v)) refuse_head_field(name, *key, v);
    } else if (*key == "weights") {
      const std::string* s = v.as_string();
      if (!s || (*s != "lora" && *s != "full")) refuse_head_field(name, *key, v);
      f.weights = *s;
    } else if (*key == "weights_dtype") {
      const std::string* s = v.as_string();
      if (!s || (*s != "fp32" && *s != "bf16")) refuse_head_field(name, *key, v);
      f.weights_dtype = *s;
    } else if (*key == "quantization") {
      if (!v.is_none()) refuse_head_field(name, *key, v);
    } else {
      fail(ErrorKind::kUnsupported,
           "{}: key \"{}\" ({}) is not a head.pt field kev knows, and kev refuses a checkpoint "
           "field that might change inference rather than guess (it knows {})",
           name, *key, shown(v), known_head_keys());
    }
  }
  if (f.weights == "full") {
    // A full-weight checkpoint's backbone loads in the dtype head.pt names; kev runs BF16
    // weights only, so a float32 backbone is refused rather than rounded.
    if (f.weights_dtype != "bf16")
      fail(ErrorKind::kUnsupported,
           "{}: \"weights\" is \"full\" with \"weights_dtype\" \"{}\"; kev runs a full-weight "
           "backbone only as stored in bfloat16 (\"bf16\"), and would have to round this one",
           name, f.weights_dtype);
    if (f.lora && *f.lora != 0)
      fail(ErrorKind::kBadInput,
           "{}: \"weights\" is \"full\" but \"lora\" is {}; a full-weight checkpoint has no "
           "adapter (lora 0)",
           name, *f.lora);
  }
  return f;
}

nlohmann::json checkpoint_fields_json(const CheckpointFields& f) {
  return Json{{"option_isolation", f.option_isolation},
              {"special_embeddings", f.special_embeddings},
              {"weights", f.weights},
              {"weights_dtype", f.weights_dtype},
              {"multimodal", f.multimodal},
              {"quantization", nullptr},
              {"trainable_token_indices", nullptr}};
}

void check_bundle_supported(const ManifestJson& m, const std::string& path) {
  if (!m.is_object()) fail(ErrorKind::kBadInput, "{} must hold a JSON object", path);
  static constexpr const char* kKnown[] = {
      "format",     "model",          "base",           "checkpoint", "reference",
      "inputs",     "outputs",        "merged_targets", "lora",       "dtypes",
      "dimensions", "temperature",    "delimiters",     "producer",   "checkpoint_fields",
      "weights",    "weights_sha256", "quantized"};
  // Named copies rather than structured bindings: clang 14 (the fuzz and TSan builds) cannot
  // capture a structured binding in a lambda.
  for (const auto& item : m.items()) {
    const std::string& key = item.key();
    if (std::none_of(std::begin(kKnown), std::end(kKnown), [&](const char* k) { return key == k; }))
      fail(ErrorKind::kUnsupported,
           "{}: key \"{}\" ({}) is not one kev {} knows; the bundle comes from a newer kev or was "
           "edited, and kev refuses rather than guess whether it changes the answers",
           path, key, shown(item.value()), KEV_VERSION);
  }
  // A quantized bundle (kev quantize): its rule must be one this kev implements; the shards say
  // which rows are stored how (the loader checks them).
  if (auto it = m.find("quantized"); it != m.end()) {
    if (!it->is_object())
      fail(ErrorKind::kBadInput, "{}: \"quantized\" is {}, not an object", path, shown(*it));
    auto rule = it->find("rule");
    if (rule == it->end() || *rule != "kev-quant-b32/1")
      fail(ErrorKind::kUnsupported,
           "{}: quantized.rule is {}; this kev {} runs only \"kev-quant-b32/1\" bundles", path,
           rule == it->end() ? std::string("missing") : shown(*rule), KEV_VERSION);
  }
  if (auto it = m.find("format"); it != m.end() && *it != kBundleFormatTag)
    fail(ErrorKind::kUnsupported, "{}: \"format\" is {}; this kev runs \"{}\" bundles", path,
         shown(*it), kBundleFormatTag);
  // The form: "lora" (merged into the base) or "full" (the checkpoint's own backbone). A bundle
  // from before the key existed is a LoRA export.
  std::string form = "lora";
  if (auto it = m.find("weights"); it != m.end()) {
    if (*it != "lora" && *it != "full")
      fail(ErrorKind::kUnsupported, "{}: \"weights\" is {}; kev runs only \"lora\" or \"full\"",
           path, shown(*it));
    form = it->get<std::string>();
  }
  if (auto it = m.find("weights_sha256"); it != m.end() && !it->is_string())
    fail(ErrorKind::kBadInput, "{}: \"weights_sha256\" is {}, not a string", path, shown(*it));
  if (auto it = m.find("checkpoint_fields"); it != m.end()) {
    if (!it->is_object())
      fail(ErrorKind::kBadInput, "{}: \"checkpoint_fields\" is {}, not an object", path,
           shown(*it));
    for (const auto& item : it->items()) {
      const std::string& key = item.key();
      const auto& v = item.value();
      bool known = std::any_of(std::begin(kFields), std::end(kFields),
                               [&](const Field& f) { return key == f.key; });
      if (!known)
        fail(ErrorKind::kUnsupported,
             "{}: checkpoint_fields.{} ({}) is not a field kev {} knows; the bundle comes from a "
             "newer kev or was edited, and kev refuses rather than guess whether it changes the "
             "answers",
             path, key, shown(v), KEV_VERSION);
      bool ok = false;
      if (key == "weights")
        ok = v == form;
      else if (key == "weights_dtype")
        ok = v == "fp32" || v == "bf16";
      else if (key == "quantization" || key == "trainable_token_indices")
        ok = v.is_null();
      else
        ok = v == false;
      if (!ok) {
        const Field& f = field(key);
        if (key == "weights" && (v == "lora" || v == "full"))
          fail(ErrorKind::kUnsupported,
               "{}: checkpoint_fields.weights is {} but the bundle's \"weights\" is \"{}\"; the "
               "manifest contradicts itself (edited?), and kev refuses rather than guess which "
               "form the shards hold",
               path, shown(v), form);
        fail(ErrorKind::kUnsupported, "{}: checkpoint_fields.{} is {}; kev runs only {}: {}", path,
             key, shown(v), f.json, f.why);
      }
    }
  }
  if (auto it = m.find("dtypes"); it != m.end()) {
    if (!it->is_object())
      fail(ErrorKind::kBadInput, "{}: \"dtypes\" is {}, not an object", path, shown(*it));
    static constexpr std::pair<const char*, const char*> kDtypes[] = {
        {"weights", "BF16"}, {"merged_targets", "BF16"}, {"merge_compute", "F32"}, {"head", "F32"}};
    for (const auto& item : it->items()) {
      const std::string& key = item.key();
      const auto& v = item.value();
      auto rule = std::find_if(std::begin(kDtypes), std::end(kDtypes),
                               [&](const auto& d) { return key == d.first; });
      if (rule == std::end(kDtypes))
        fail(ErrorKind::kUnsupported, "{}: dtypes.{} ({}) is not one kev {} knows", path, key,
             shown(v), KEV_VERSION);
      if (v != rule->second)
        fail(ErrorKind::kUnsupported, "{}: dtypes.{} is {}; kev runs only \"{}\"", path, key,
             shown(v), rule->second);
    }
  }
}

}  // namespace kev
