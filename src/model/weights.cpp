#include "kev/model/weights.h"

#include <nlohmann/json.hpp>

#include <fmt/format.h>

#include <algorithm>
#include <cstring>
#include <map>
#include <optional>
#include <set>

#include "kev/core/bf16.h"
#include "kev/core/error.h"
#include "kev/core/file.h"

namespace kev {
namespace {

struct Located {
  const SafetensorsFile* file = nullptr;
  const TensorInfo* info = nullptr;
};

bool starts_with(const std::string& s, const std::string& p) {
  return s.starts_with(p);
}

// Tensors that belong to other parts of the multimodal checkpoint.
bool ignored(const std::string& name) {
  for (const char* p : {"model.visual.", "visual.", "mtp.", "model.mtp.", "lm_head."})
    if (starts_with(name, p)) return true;
  return false;
}

class Catalog {
 public:
  explicit Catalog(const std::string& dir) {
    std::string index = dir + "/model.safetensors.index.json";
    if (path_exists(index)) {
      load_index(dir, index);
    } else if (path_exists(dir + "/model.safetensors")) {
      open(dir + "/model.safetensors");
      for (const auto& t : files.back()->tensors()) by_name[t.name] = {files.back().get(), &t};
    } else {
      fail(ErrorKind::kBadInput,
           "{}: no model.safetensors.index.json or model.safetensors; not a model directory", dir);
    }
  }

  std::vector<std::unique_ptr<SafetensorsFile>> files;
  std::map<std::string, Located> by_name;

 private:
  void open(const std::string& path) {
    if (!path_exists(path)) fail(ErrorKind::kBadInput, "{}: shard is missing", path);
    files.push_back(std::make_unique<SafetensorsFile>(path));
  }

  void load_index(const std::string& dir, const std::string& index) {
    nlohmann::json j;
    try {
      j = nlohmann::json::parse(read_file(index));
    } catch (const nlohmann::json::exception& e) {
      fail(ErrorKind::kBadInput, "{}: not valid JSON ({})", index, e.what());
    }
    auto wm = j.find("weight_map");
    if (!j.is_object() || wm == j.end() || !wm->is_object())
      fail(ErrorKind::kBadInput, "{}: missing object 'weight_map'", index);
    std::map<std::string, const SafetensorsFile*> shards;
    for (auto& [name, shard] : wm->items()) {
      if (!shard.is_string())
        fail(ErrorKind::kBadInput, "{}: weight_map entry '{}' is not a string", index, name);
      std::string s = shard.get<std::string>();
      if (s.empty() || s.find('/') != std::string::npos || s == "." || s == "..")
        fail(ErrorKind::kBadInput, "{}: weight_map entry '{}' names a bad shard '{}'", index, name,
             s);
      if (!shards.count(s)) {
        open(dir + "/" + s);
        shards[s] = files.back().get();
      }
      const SafetensorsFile* f = shards[s];
      const TensorInfo* t = f->find(name);
      if (!t && !ignored(name))
        fail(ErrorKind::kBadInput, "{}: tensor '{}' is listed in the index but absent from it",
             f->path(), name);
      if (t) by_name[name] = {f, t};
    }
  }
};

class Binder {
 public:
  Binder(Catalog& cat, std::string prefix) : cat_(cat), prefix_(std::move(prefix)) {}

  // rel's BF16 tensor, or (a quantized bundle) its stored parts, kept in parts[rel]; then the
  // matrix has no data.
  Bf16Matrix matrix(const std::string& rel, int64_t rows, int64_t cols,
                    std::map<std::string, std::vector<StoredPart>>& parts) {
    if (!cat_.by_name.count(prefix_ + rel)) {
      std::vector<StoredPart> p = stored_parts(rel, rows, cols);
      if (!p.empty()) {
        parts[rel] = std::move(p);
        return {nullptr, rows, cols};
      }
    }
    auto [f, t] = find(rel);
    check_shape(*f, *t, {rows, cols});
    if (t->dtype != DType::kBF16)
      fail(ErrorKind::kBadInput, "{}: tensor '{}' has dtype {}, expected BF16", f->path(), t->name,
           dtype_name(t->dtype));
    return {reinterpret_cast<const uint16_t*>(f->data(*t)), rows, cols};
  }

  std::vector<float> vector(const std::string& rel, std::vector<int64_t> shape) {
    auto [f, t] = find(rel);
    check_shape(*f, *t, shape);
    std::vector<float> out(static_cast<size_t>(t->numel()));
    const uint8_t* p = f->data(*t);
    if (t->dtype == DType::kF32) {
      std::memcpy(out.data(), p, out.size() * 4);
    } else if (t->dtype == DType::kBF16) {
      for (size_t i = 0; i < out.size(); ++i) {
        uint16_t b;
        std::memcpy(&b, p + 2 * i, 2);
        out[i] = bf16_to_f32(b);
      }
    } else {
      fail(ErrorKind::kBadInput, "{}: tensor '{}' has dtype {}, expected BF16 or F32", f->path(),
           t->name, dtype_name(t->dtype));
    }
    return out;
  }

  const std::set<std::string>& used() const { return used_; }

 private:
  // The parts `<name>@<r0>-<r1>.<kind>` of a quantized bundle's projection (weights.h), checked
  // to tile [0, rows) with the right shapes and dtypes; empty when there are none.
  std::vector<StoredPart> stored_parts(const std::string& rel, int64_t rows, int64_t cols) {
    const std::string stem = prefix_ + rel + "@";
    const int64_t blocks = (cols + kQuantBlock - 1) / kQuantBlock;
    std::vector<StoredPart> parts;
    for (auto it = cat_.by_name.lower_bound(stem);
         it != cat_.by_name.end() && starts_with(it->first, stem); ++it) {
      const std::string suffix = it->first.substr(stem.size());
      if (suffix.ends_with(".scale")) continue;  // read with its part
      const auto [f, t] = it->second;
      const std::optional<PartName> name = parse_part_name(suffix, rows);
      if (!name)
        fail(ErrorKind::kBadInput,
             "{}: tensor '{}' is not a part <rows>@<r0>-<r1>.<bf16|q8|q4|q5|q4z|q5z> of a {}-row "
             "projection",
             f->path(), t->name, rows);
      StoredPart part;
      part.rows = {name->row0, name->row1, WeightKind::kExact};
      const int64_t n = name->row1 - name->row0;
      const std::string& k = name->kind;
      if (k == "bf16") {
        expect(*f, *t, DType::kBF16, {n, cols});
      } else if (const WeightKind wk = quantized_kind_named(k); wk != WeightKind::kExact) {
        part.rows.kind = wk;
        const StoredLayout layout = stored_layout(part.rows.kind, blocks);
        expect(*f, *t, k == "q8" ? DType::kI8 : DType::kU8, {n, blocks * layout.block_bytes});
        auto sc = cat_.by_name.find(it->first + ".scale");
        if (sc == cat_.by_name.end())
          fail(ErrorKind::kBadInput, "{}: tensor '{}' has no '{}.scale'", f->path(), t->name,
               t->name);
        expect(*sc->second.file, *sc->second.info, k == "q8" ? DType::kF32 : DType::kF16,
               {n, layout.scales});
        part.scale = sc->second.file->data(*sc->second.info);
        used_.insert(sc->first);
      } else {
        fail(ErrorKind::kBadInput,
             "{}: tensor '{}' is stored as '{}', which this kev does not know", f->path(), t->name,
             k);
      }
      part.q = f->data(*t);
      used_.insert(it->first);
      parts.push_back(part);
    }
    std::sort(parts.begin(), parts.end(),
              [](const StoredPart& a, const StoredPart& b) { return a.rows.row0 < b.rows.row0; });
    int64_t next = 0;
    for (const StoredPart& p : parts) {
      if (p.rows.row0 != next)
        fail(ErrorKind::kBadInput,
             "projection '{}{}' is stored in parts that do not cover its rows in order (rows {} "
             "follow {})",
             prefix_, rel, p.rows.row0, next);
      next = p.rows.row1;
    }
    if (!parts.empty() && next != rows)
      fail(ErrorKind::kBadInput,
           "projection '{}{}' is stored in parts that cover {} of its {} rows", prefix_, rel, next,
           rows);
    return parts;
  }

  void expect(const SafetensorsFile& f, const TensorInfo& t, DType d, std::vector<int64_t> shape) {
    if (t.dtype != d)
      fail(ErrorKind::kBadInput, "{}: tensor '{}' has dtype {}, expected {}", f.path(), t.name,
           dtype_name(t.dtype), dtype_name(d));
    check_shape(f, t, shape);
  }

 public:
 private:
  Located find(const std::string& rel) {
    std::string name = prefix_ + rel;
    auto it = cat_.by_name.find(name);
    if (it == cat_.by_name.end())
      fail(ErrorKind::kBadInput, "model is missing tensor '{}' required by config.json", name);
    used_.insert(name);
    return it->second;
  }

  void check_shape(const SafetensorsFile& f, const TensorInfo& t, const std::vector<int64_t>& s) {
    if (t.shape != s)
      fail(ErrorKind::kBadInput, "{}: tensor '{}' has shape {}, config.json implies {}", f.path(),
           t.name, shape_string(t.shape), shape_string(s));
  }

  Catalog& cat_;
  std::string prefix_;
  std::set<std::string> used_;
};

std::string detect_prefix(const Catalog& cat, const std::string& dir) {
  for (const char* p : {"model.language_model.", "model.", ""})
    if (cat.by_name.count(std::string(p) + "embed_tokens.weight")) return p;
  fail(ErrorKind::kBadInput,
       "{}: no embed_tokens.weight (with prefix 'model.language_model.', 'model.' or none)", dir);
}

}  // namespace

std::unique_ptr<ModelWeights> ModelWeights::load(const std::string& dir) {
  auto w = std::unique_ptr<ModelWeights>(new ModelWeights());
  w->config_ = ModelConfig::load(dir);
  const ModelConfig& c = w->config_;
  Catalog cat(dir);
  w->prefix_ = detect_prefix(cat, dir);
  Binder b(cat, w->prefix_);
  const int64_t h = c.hidden, hd = c.head_dim;
  w->embed_ = b.matrix("embed_tokens.weight", c.vocab, h, w->stored_);
  w->final_norm_ = b.vector("norm.weight", {h});
  for (int64_t l = 0; l < c.layers; ++l) {
    std::string p = "layers." + std::to_string(l) + ".";
    LayerWeights lw;
    lw.full_attention = c.full_attention[static_cast<size_t>(l)];
    lw.input_norm = b.vector(p + "input_layernorm.weight", {h});
    lw.post_norm = b.vector(p + "post_attention_layernorm.weight", {h});
    lw.gate = b.matrix(p + "mlp.gate_proj.weight", c.intermediate, h, w->stored_);
    lw.up = b.matrix(p + "mlp.up_proj.weight", c.intermediate, h, w->stored_);
    lw.down = b.matrix(p + "mlp.down_proj.weight", h, c.intermediate, w->stored_);
    if (lw.full_attention) {
      std::string a = p + "self_attn.";
      lw.attn.q = b.matrix(a + "q_proj.weight", c.heads * hd * 2, h, w->stored_);
      lw.attn.k = b.matrix(a + "k_proj.weight", c.kv_heads * hd, h, w->stored_);
      lw.attn.v = b.matrix(a + "v_proj.weight", c.kv_heads * hd, h, w->stored_);
      lw.attn.o = b.matrix(a + "o_proj.weight", h, c.heads * hd, w->stored_);
      lw.attn.q_norm = b.vector(a + "q_norm.weight", {hd});
      lw.attn.k_norm = b.vector(a + "k_norm.weight", {hd});
    } else {
      std::string g = p + "linear_attn.";
      const int64_t lv = c.linear_value_heads, vt = c.lin_v_total();
      lw.gdn.qkv = b.matrix(g + "in_proj_qkv.weight", c.conv_dim(), h, w->stored_);
      lw.gdn.z = b.matrix(g + "in_proj_z.weight", vt, h, w->stored_);
      lw.gdn.a = b.matrix(g + "in_proj_a.weight", lv, h, w->stored_);
      lw.gdn.b = b.matrix(g + "in_proj_b.weight", lv, h, w->stored_);
      lw.gdn.out = b.matrix(g + "out_proj.weight", h, vt, w->stored_);
      lw.gdn.conv = b.vector(g + "conv1d.weight", {c.conv_dim(), 1, c.conv_kernel});
      lw.gdn.a_log = b.vector(g + "A_log", {lv});
      lw.gdn.dt_bias = b.vector(g + "dt_bias", {lv});
      lw.gdn.norm = b.vector(g + "norm.weight", {c.linear_value_dim});
    }
    w->layers_.push_back(std::move(lw));
  }
  // Anything else under the language prefix would be a setting we do not implement (biases,
  // extra layers, a different layer type); refusing beats silently ignoring weights.
  for (const auto& [name, loc] : cat.by_name) {
    if (ignored(name) || b.used().count(name)) continue;
    if (w->prefix_.empty() || starts_with(name, w->prefix_))
      fail(ErrorKind::kBadInput, "{}: unexpected tensor '{}' that config.json does not account for",
           loc.file->path(), name);
  }
  w->files_ = std::move(cat.files);
  for (int64_t l = 0; l < c.layers; ++l) {
    const LayerWeights& lw = w->layers_[static_cast<size_t>(l)];
    const std::string p = "layers." + std::to_string(l) + ".";
    auto put = [&](const std::string& rel, const Bf16Matrix& m) { w->projections_[p + rel] = &m; };
    if (lw.full_attention) {
      put("self_attn.q_proj.weight", lw.attn.q);
      put("self_attn.k_proj.weight", lw.attn.k);
      put("self_attn.v_proj.weight", lw.attn.v);
      put("self_attn.o_proj.weight", lw.attn.o);
    } else {
      put("linear_attn.in_proj_qkv.weight", lw.gdn.qkv);
      put("linear_attn.in_proj_z.weight", lw.gdn.z);
      put("linear_attn.out_proj.weight", lw.gdn.out);
    }
    put("mlp.gate_proj.weight", lw.gate);
    put("mlp.up_proj.weight", lw.up);
    put("mlp.down_proj.weight", lw.down);
  }
  for (const auto& [name, parts] : w->stored_)
    if (!w->projections_.count(name))
      fail(ErrorKind::kBadInput,
           "{}: tensor '{}{}' is stored in parts, which only the big "
           "projections may be",
           dir, w->prefix_, name);
  return w;
}

std::string ModelWeights::stored_kinds() const {
  std::string kinds;
  for (WeightKind k : kQuantizedKinds) {
    const bool has = std::any_of(stored_.begin(), stored_.end(), [&](const auto& entry) {
      return std::any_of(entry.second.begin(), entry.second.end(),
                         [&](const StoredPart& p) { return p.rows.kind == k; });
    });
    if (!has) continue;
    if (!kinds.empty()) kinds += '+';
    kinds += weight_kind_name(k);
  }
  return !kinds.empty() ? kinds : quantized() ? "bf16" : "";
}

void ModelWeights::release_pages(const Bf16Matrix& m) const {
  release_bytes(m.data, static_cast<size_t>(m.rows * m.cols) * 2);
}

void ModelWeights::release_bytes(const void* data, size_t bytes) const {
  const auto* begin = static_cast<const uint8_t*>(data);
  if (!begin) return;
  for (const auto& f : files_) {
    const uint8_t* base = f->file().data();
    if (base && begin >= base && begin + bytes <= base + f->file().size()) {
      f->file().release_pages(static_cast<size_t>(begin - base), bytes);
      return;
    }
  }
}

}  // namespace kev
