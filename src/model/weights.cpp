#include "kev/model/weights.h"

#include <nlohmann/json.hpp>

#include <cstring>
#include <map>
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

  Bf16Matrix matrix(const std::string& rel, int64_t rows, int64_t cols) {
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
  w->embed_ = b.matrix("embed_tokens.weight", c.vocab, h);
  w->final_norm_ = b.vector("norm.weight", {h});
  for (int64_t l = 0; l < c.layers; ++l) {
    std::string p = "layers." + std::to_string(l) + ".";
    LayerWeights lw;
    lw.full_attention = c.full_attention[static_cast<size_t>(l)];
    lw.input_norm = b.vector(p + "input_layernorm.weight", {h});
    lw.post_norm = b.vector(p + "post_attention_layernorm.weight", {h});
    lw.gate = b.matrix(p + "mlp.gate_proj.weight", c.intermediate, h);
    lw.up = b.matrix(p + "mlp.up_proj.weight", c.intermediate, h);
    lw.down = b.matrix(p + "mlp.down_proj.weight", h, c.intermediate);
    if (lw.full_attention) {
      std::string a = p + "self_attn.";
      lw.attn.q = b.matrix(a + "q_proj.weight", c.heads * hd * 2, h);
      lw.attn.k = b.matrix(a + "k_proj.weight", c.kv_heads * hd, h);
      lw.attn.v = b.matrix(a + "v_proj.weight", c.kv_heads * hd, h);
      lw.attn.o = b.matrix(a + "o_proj.weight", h, c.heads * hd);
      lw.attn.q_norm = b.vector(a + "q_norm.weight", {hd});
      lw.attn.k_norm = b.vector(a + "k_norm.weight", {hd});
    } else {
      std::string g = p + "linear_attn.";
      const int64_t lv = c.linear_value_heads, vt = c.lin_v_total();
      lw.gdn.qkv = b.matrix(g + "in_proj_qkv.weight", c.conv_dim(), h);
      lw.gdn.z = b.matrix(g + "in_proj_z.weight", vt, h);
      lw.gdn.a = b.matrix(g + "in_proj_a.weight", lv, h);
      lw.gdn.b = b.matrix(g + "in_proj_b.weight", lv, h);
      lw.gdn.out = b.matrix(g + "out_proj.weight", h, vt);
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
  return w;
}

void ModelWeights::release_pages(const Bf16Matrix& m) const {
  const auto* begin = reinterpret_cast<const uint8_t*>(m.data);
  const size_t bytes = static_cast<size_t>(m.rows * m.cols) * 2;
  for (const auto& f : files_) {
    const uint8_t* base = f->file().data();
    if (base && begin >= base && begin + bytes <= base + f->file().size()) {
      f->file().release_pages(static_cast<size_t>(begin - base), bytes);
      return;
    }
  }
}

}  // namespace kev
