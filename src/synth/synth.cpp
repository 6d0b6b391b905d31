#include "kev/synth/synth.h"

#include <sys/stat.h>

#include <fmt/format.h>
#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <nlohmann/json.hpp>

#include "kev/core/bf16.h"
#include "kev/core/error.h"
#include "kev/core/file.h"
#include "kev/core/interrupt.h"
#include "kev/core/progress.h"
#include "kev/core/threads.h"
#include "kev/formats/torch_checkpoint.h"

namespace kev {
namespace {

constexpr const char* kLm = "model.language_model.";
constexpr int64_t kConvKernel = 4;
constexpr int64_t kVisionHidden = 16, kVisionInter = 32, kVisionPatch = 4, kVisionTemporal = 2;
constexpr size_t kChunk = size_t{1} << 21;  // elements generated per write
constexpr size_t kPiece = size_t{1} << 16;  // elements per parallel work item

// ---- deterministic values: a pure function of (seed, tensor name, element index) ----------

uint64_t mix(uint64_t z) {  // splitmix64 finaliser
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

uint64_t tensor_key(uint64_t seed, std::string_view name) {
  uint64_t h = 0xcbf29ce484222325ULL;  // FNV-1a
  for (char c : name) h = (h ^ static_cast<uint8_t>(c)) * 0x100000001b3ULL;
  return mix(h ^ mix(seed + 0x9e3779b97f4a7c15ULL));
}

// Uniform in (0, 1), never exactly 0, 1/2 or 1 (so symmetric ranges never give exact zeros).
double unit(uint64_t key, uint64_t i) {
  uint64_t r = mix(key + (i + 1) * 0x9e3779b97f4a7c15ULL);
  return (static_cast<double>(r >> 40) + 0.5) / 16777216.0;
}

enum class Init { kUniform, kLogUniform };

struct Dist {
  Init init = Init::kUniform;
  double lo = -1, hi = 1;
  float at(uint64_t key, uint64_t i) const {
    double u = lo + (hi - lo) * unit(key, i);
    return static_cast<float>(init == Init::kLogUniform ? std::log(u) : u);
  }
};

Dist uniform(double a) {
  return {Init::kUniform, -a, a};
}

// How a tensor is initialised, from its name and shape (the spec's rules).
Dist dist_for(const TensorSpec& t) {
  const std::string& n = t.name;
  auto ends = [&](std::string_view s) {
    return n.size() >= s.size() && n.compare(n.size() - s.size(), s.size(), s) == 0;
  };
  if (ends("A_log")) return {Init::kLogUniform, 1.0, 16.0};
  if (ends("dt_bias")) return uniform(0.5);
  if (ends("conv1d.weight")) return uniform(0.5);
  if (ends("linear_attn.norm.weight")) return {Init::kUniform, 0.9, 1.1};
  if (ends("embed_tokens.weight")) return uniform(1.0);
  if (t.shape.size() == 1) return uniform(0.1);  // RMSNorm weights (1 + w) and biases
  int64_t in = 1;
  for (size_t i = 1; i < t.shape.size(); ++i) in *= t.shape[i];
  return uniform(1.0 / std::sqrt(static_cast<double>(in)));
}

// Streams a tensor's values in chunks; `sink` receives each chunk's bytes.
template <typename Sink>
void generate(const TensorSpec& t, uint64_t seed, const Dist& dist, std::vector<uint8_t>& buffer,
              Sink&& sink) {
  const uint64_t key = tensor_key(seed, t.name);
  const size_t item = dtype_size(t.dtype);
  const bool bf16_exact = t.name.ends_with("A_log") || t.name.ends_with("linear_attn.norm.weight");
  const uint64_t numel = t.nbytes() / item;
  buffer.resize(std::min<uint64_t>(numel, kChunk) * item);
  for (uint64_t begin = 0; begin < numel; begin += kChunk) {
    check_interrupted();
    const uint64_t n = std::min<uint64_t>(kChunk, numel - begin);
    const size_t pieces = (n + kPiece - 1) / kPiece;
    auto fill = [&](size_t p) {
      uint64_t lo = p * kPiece, hi = std::min<uint64_t>(n, lo + kPiece);
      for (uint64_t i = lo; i < hi; ++i) {
        float f = dist.at(key, begin + i);
        // The base's F32 vectors (A_log, the GDN norm) hold BF16-representable values, so a
        // full-weight checkpoint made from this one, where every tensor is BF16, carries the
        // same values (and both export to bundles that answer alike).
        if (t.dtype == DType::kF32 && bf16_exact) f = bf16_to_f32(f32_to_bf16(f));
        if (t.dtype == DType::kBF16) {
          uint16_t b = f32_to_bf16(f);
          std::memcpy(buffer.data() + i * 2, &b, 2);
        } else {
          std::memcpy(buffer.data() + i * 4, &f, 4);
        }
      }
    };
    if (pieces > 1) {
      parallel_for(pieces, fill);
    } else {
      fill(0);
    }
    sink(buffer.data(), n * item);
  }
}

std::string layer_prefix(int64_t n) {
  return std::string(kLm) + "layers." + std::to_string(n) + ".";
}

struct Target {
  std::string module;  // "mlp.gate_proj", ...
  int64_t out, in;
};

std::vector<Target> layer_targets(const SynthShape& s, int64_t layer) {
  const int64_t h = s.hidden;
  std::vector<Target> t;
  if (is_full_attention_layer(layer)) {
    t.push_back({"self_attn.q_proj", s.heads * s.head_dim * 2, h});
    t.push_back({"self_attn.k_proj", s.kv_heads * s.head_dim, h});
    t.push_back({"self_attn.v_proj", s.kv_heads * s.head_dim, h});
    t.push_back({"self_attn.o_proj", h, s.heads * s.head_dim});
  } else {
    const int64_t key = s.linear_key_heads * s.linear_key_dim,
                  value = s.linear_value_heads * s.linear_value_dim;
    t.push_back({"linear_attn.in_proj_qkv", 2 * key + value, h});
    t.push_back({"linear_attn.in_proj_z", value, h});
    t.push_back({"linear_attn.in_proj_a", s.linear_value_heads, h});
    t.push_back({"linear_attn.in_proj_b", s.linear_value_heads, h});
    t.push_back({"linear_attn.out_proj", h, value});
  }
  t.push_back({"mlp.gate_proj", s.intermediate, h});
  t.push_back({"mlp.up_proj", s.intermediate, h});
  t.push_back({"mlp.down_proj", h, s.intermediate});
  return t;
}

void validate(const SynthShape& s) {
  auto positive = [](const char* what, int64_t v, int64_t max) {
    if (v <= 0 || v > max)
      fail(ErrorKind::kBadInput, "synth: {} must be in 1..{}, got {}", what, max, v);
  };
  positive("--hidden", s.hidden, 1 << 16);
  positive("--intermediate", s.intermediate, 1 << 18);
  positive("--layers", s.layers, 256);
  positive("--heads", s.heads, 1024);
  positive("--kv-heads", s.kv_heads, 1024);
  positive("--head-dim", s.head_dim, 4096);
  positive("--linear-key-heads", s.linear_key_heads, 1024);
  positive("--linear-value-heads", s.linear_value_heads, 1024);
  positive("--linear-key-dim", s.linear_key_dim, 4096);
  positive("--linear-value-dim", s.linear_value_dim, 4096);
  positive("--vocab", s.vocab, 1 << 22);
  positive("--pointer", s.pointer, 1 << 16);
  positive("--rank", s.rank, 4096);
  positive("--alpha", s.alpha, 1 << 20);
  if (s.heads % s.kv_heads)
    fail(ErrorKind::kBadInput, "synth: --heads ({}) must be a multiple of --kv-heads ({})", s.heads,
         s.kv_heads);
  if (s.linear_value_heads % s.linear_key_heads)
    fail(ErrorKind::kBadInput,
         "synth: --linear-value-heads ({}) must be a multiple of --linear-key-heads ({})",
         s.linear_value_heads, s.linear_key_heads);
}

// ---- small JSON files -------------------------------------------------------------------

nlohmann::ordered_json text_config(const SynthShape& s) {
  using ordered = nlohmann::ordered_json;
  ordered layer_types = ordered::array();
  for (int64_t i = 0; i < s.layers; ++i)
    layer_types.push_back(is_full_attention_layer(i) ? "full_attention" : "linear_attention");
  ordered text = {{"model_type", "qwen3_5_text"},
                  {"hidden_size", s.hidden},
                  {"intermediate_size", s.intermediate},
                  {"num_hidden_layers", s.layers},
                  {"num_attention_heads", s.heads},
                  {"num_key_value_heads", s.kv_heads},
                  {"head_dim", s.head_dim},
                  {"linear_num_key_heads", s.linear_key_heads},
                  {"linear_num_value_heads", s.linear_value_heads},
                  {"linear_key_head_dim", s.linear_key_dim},
                  {"linear_value_head_dim", s.linear_value_dim},
                  {"linear_conv_kernel_dim", kConvKernel},
                  {"layer_types", layer_types},
                  {"full_attention_interval", 4},
                  {"rms_norm_eps", 1e-6},
                  {"vocab_size", s.vocab},
                  {"tie_word_embeddings", true},
                  {"attn_output_gate", true},
                  {"hidden_act", "silu"},
                  {"rope_parameters",
                   {{"rope_type", "default"},
                    {"rope_theta", 10000000},
                    {"partial_rotary_factor", 0.25},
                    {"mrope_section", {11, 11, 10}},
                    {"mrope_interleaved", true}}},
                  {"max_position_embeddings", 262144},
                  {"dtype", "bfloat16"}};
  return text;
}

// What save_pretrained of transformers' Qwen3_5TextModel writes: the text settings at the top.
std::string full_config_json(const SynthShape& s) {
  nlohmann::ordered_json j = {{"architectures", {"Qwen3_5TextModel"}}};
  const nlohmann::ordered_json text = text_config(s);
  for (const auto& [k, v] : text.items()) j[k] = v;
  j["kev_synthetic"] = {{"shape", s.name}, {"form", "full"}};
  return j.dump(2) + "\n";
}

std::string config_json(const SynthShape& s) {
  using ordered = nlohmann::ordered_json;
  ordered text = text_config(s);
  ordered vision = {{"model_type", "qwen3_5_vision"},
                    {"depth", 1},
                    {"hidden_size", kVisionHidden},
                    {"intermediate_size", kVisionInter},
                    {"num_heads", 2},
                    {"in_channels", 3},
                    {"patch_size", kVisionPatch},
                    {"temporal_patch_size", kVisionTemporal},
                    {"spatial_merge_size", 2},
                    {"out_hidden_size", s.hidden}};
  ordered j = {{"architectures", {"Qwen3_5ForConditionalGeneration"}},
               {"model_type", "qwen3_5"},
               {"tie_word_embeddings", true},
               {"text_config", text},
               {"vision_config", vision},
               {"kev_synthetic", {{"shape", s.name}}}};
  return j.dump(2) + "\n";
}

std::string tokenizer_config_json(const nlohmann::json& tokenizer) {
  nlohmann::ordered_json decoder = nlohmann::ordered_json::object();
  if (tokenizer.contains("added_tokens") && tokenizer["added_tokens"].is_array())
    for (const auto& t : tokenizer["added_tokens"])
      decoder[std::to_string(t.value("id", 0))] = {{"content", t.value("content", "")},
                                                   {"lstrip", false},
                                                   {"normalized", false},
                                                   {"rstrip", false},
                                                   {"single_word", false},
                                                   {"special", t.value("special", true)}};
  nlohmann::ordered_json j = {{"add_bos_token", false},
                              {"add_prefix_space", false},
                              {"added_tokens_decoder", decoder},
                              {"bos_token", nullptr},
                              {"clean_up_tokenization_spaces", false},
                              {"eos_token", "<|endoftext|>"},
                              {"errors", "replace"},
                              {"model_max_length", 262144},
                              {"pad_token", "<|endoftext|>"},
                              {"split_special_tokens", false},
                              {"tokenizer_class", "Qwen2Tokenizer"},
                              {"unk_token", nullptr}};
  return j.dump(2) + "\n";
}

int64_t largest_token_id(const nlohmann::json& tok, const std::string& file) {
  int64_t largest = -1;
  try {
    for (const auto& [k, v] : tok.at("model").at("vocab").items())
      largest = std::max<int64_t>(largest, v.get<int64_t>());
    if (tok.contains("added_tokens"))
      for (const auto& t : tok.at("added_tokens"))
        largest = std::max<int64_t>(largest, t.at("id").get<int64_t>());
  } catch (const nlohmann::json::exception& e) {
    fail(ErrorKind::kBadInput, "{} is not a tokenizer.json with model.vocab: {}", file, e.what());
  }
  if (largest < 0) fail(ErrorKind::kBadInput, "{} has an empty vocabulary", file);
  return largest;
}

std::string adapter_config_json(const SynthShape& s) {
  nlohmann::ordered_json j = {
      {"alpha_pattern", nlohmann::json::object()},
      {"auto_mapping", nullptr},
      {"base_model_name_or_path", "Qwen/Qwen3.5-4B-Base"},
      {"bias", "none"},
      {"fan_in_fan_out", false},
      {"inference_mode", true},
      {"init_lora_weights", true},
      {"layers_pattern", nullptr},
      {"layers_to_transform", nullptr},
      {"lora_alpha", s.alpha},
      {"lora_dropout", 0.05},
      {"modules_to_save", nullptr},
      {"peft_type", "LORA"},
      {"r", s.rank},
      {"rank_pattern", nlohmann::json::object()},
      {"revision", nullptr},
      {"target_modules",
       {"q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj", "in_proj_qkv",
        "in_proj_z", "in_proj_a", "in_proj_b", "out_proj"}},
      {"task_type", "FEATURE_EXTRACTION"},
      {"use_dora", false},
      {"use_rslora", false}};
  return j.dump(2) + "\n";
}

// ---- writers ------------------------------------------------------------------------------

PyValue tensor_value(const TensorSpec& spec, uint64_t seed) {
  auto t = std::make_shared<TorchTensor>();
  t->dtype = spec.dtype;
  t->shape = spec.shape;
  t->location = "cpu";
  std::vector<uint8_t> buffer;
  generate(spec, seed, dist_for(spec), buffer,
           [&](const uint8_t* p, size_t n) { t->bytes.insert(t->bytes.end(), p, p + n); });
  return PyValue{t};
}

PyValue str(std::string s) {
  return PyValue{std::move(s)};
}
PyValue num(int64_t i) {
  return PyValue{i};
}

void write_head(const std::string& path, const SynthOptions& o, bool full) {
  const SynthShape& s = o.shape;
  auto head = std::make_shared<PyDict>();
  head->ordered = true;
  for (const char* name : {"q", "k"}) {
    std::string w = std::string(name) + ".weight", b = std::string(name) + ".bias";
    head->emplace_back(str(w),
                       tensor_value({"head." + w, DType::kF32, {s.pointer, s.hidden}}, o.seed));
    head->emplace_back(str(b), tensor_value({"head." + b, DType::kF32, {s.pointer}}, o.seed));
  }
  auto args = std::make_shared<PyDict>();
  args->emplace_back(str("lr"), PyValue{2e-4});
  args->emplace_back(str("epochs"), num(1));
  args->emplace_back(str("batch_size"), num(8));
  args->emplace_back(str("max_state_tokens"), num(384));
  args->emplace_back(str("max_row_tokens"), num(1024));
  args->emplace_back(str("bf16"), PyValue{true});
  args->emplace_back(str("gradient_checkpointing"), PyValue{false});
  args->emplace_back(str("resume"), PyValue{});
  args->emplace_back(str("seed"), num(static_cast<int64_t>(o.seed & 0x7fffffff)));
  auto fit = std::make_shared<PyDict>();
  fit->emplace_back(str("temperature"), PyValue{o.temperature});
  fit->emplace_back(str("nll_before"), PyValue{0.6931471805599453});
  fit->emplace_back(str("nll_after"), PyValue{0.5});
  fit->emplace_back(str("examples"), num(512));
  auto root = std::make_shared<PyDict>();
  // A full-weight head.pt (kev.train --full_ft): lora 0, weights "full", the bf16 backbone.
  root->emplace_back(str("base"), str(full ? "Qwen/Qwen3.8-27B" : "Qwen/Qwen3.5-4B-Base"));
  root->emplace_back(str("base_revision"),
                     full ? PyValue{} : str("1001bb4d826a52d1f399e183466143f4da7b741b"));
  root->emplace_back(str("head"), PyValue{head});
  root->emplace_back(str("lora"), num(full ? 0 : s.rank));
  root->emplace_back(str("head_dim"), num(s.pointer));
  root->emplace_back(str("option_isolation"), PyValue{false});
  root->emplace_back(str("special_embeddings"), PyValue{false});
  root->emplace_back(str("weights_dtype"), str(full ? "bf16" : s.weights_dtype));
  root->emplace_back(str("weights"), str(full ? "full" : "lora"));
  root->emplace_back(str("temperature"), PyValue{o.temperature});
  root->emplace_back(str("holdout"),
                     PyValue{PyList{str("synthetic-holdout-a"), str("synthetic-holdout-b")}});
  root->emplace_back(str("args"), PyValue{args});
  root->emplace_back(str("suite_sha256"), str(std::string(64, '0')));
  root->emplace_back(str("init_source"), str("kev synth"));
  root->emplace_back(str("temperature_fit"), PyValue{fit});
  write_torch_checkpoint(path, PyValue{root}, "archive");
}

uint64_t write_safetensors(const std::string& path, const std::vector<TensorSpec>& specs,
                           uint64_t seed, Progress& progress) {
  SafetensorsWriter writer(path, specs);
  std::vector<uint8_t> buffer;
  for (const auto& t : specs) {
    generate(t, seed, dist_for(t), buffer, [&](const uint8_t* p, size_t n) {
      writer.write(p, n);
      progress.advance(n, 0);
    });
    progress.advance(0, 1);
  }
  writer.finish();
  return writer.bytes_written();
}

void make_directory(const std::string& dir) {
  if (::mkdir(dir.c_str(), 0755) != 0)
    fail(ErrorKind::kIo, "cannot create {}: {}", dir, std::strerror(errno));
}

// A model's tensors in two shard files ("STEM-00001-of-00002.safetensors", ...), with the
// index's weight map and the bytes of all of them.
struct ShardedWeights {
  std::string names[2];
  std::vector<TensorSpec> shards[2];
  nlohmann::json weight_map = nlohmann::json::object();
  uint64_t total = 0;
  size_t count = 0;  // tensors
};

// Two shards by the canonical order, cut where half of the bytes are behind us, each listing
// its tensors by name.
ShardedWeights split_shards(std::vector<TensorSpec> all, const std::string& stem) {
  ShardedWeights w;
  w.count = all.size();
  for (const auto& t : all) w.total += t.nbytes();
  uint64_t before = 0;
  for (auto& t : all) {
    const uint64_t n = t.nbytes();
    w.shards[before >= w.total / 2 ? 1 : 0].push_back(std::move(t));
    before += n;
  }
  for (int k = 0; k < 2; ++k) {
    w.names[k] = fmt::format("{}-0000{}-of-00002.safetensors", stem, k + 1);
    std::sort(w.shards[k].begin(), w.shards[k].end(),
              [](const auto& a, const auto& b) { return a.name < b.name; });
    for (const auto& t : w.shards[k]) w.weight_map[t.name] = w.names[k];
  }
  return w;
}

// A model directory: config.json, the tokenizer's two files, the shards' index and the shards.
void write_model_dir(const std::string& dir, const std::string& config,
                     const std::string& tokenizer, const std::string& tokenizer_config,
                     const ShardedWeights& w, uint64_t seed, Progress& progress) {
  write_file_synced(dir + "/config.json", config);
  write_file_synced(dir + "/tokenizer.json", tokenizer);
  write_file_synced(dir + "/tokenizer_config.json", tokenizer_config);
  const nlohmann::json index = {{"metadata", {{"total_size", w.total}}},
                                {"weight_map", w.weight_map}};
  write_file_synced(dir + "/model.safetensors.index.json", index.dump(2) + "\n");
  for (int k = 0; k < 2; ++k)
    write_safetensors(dir + "/" + w.names[k], w.shards[k], seed, progress);
}

// A full-weight checkpoint (what kev.train --full_ft publishes): DIR/checkpoint with the text
// model's config, the tokenizer, index + shards (names without prefix, every tensor BF16) and
// head.pt (weights "full", lora 0, weights_dtype "bf16"). No base directory.
SynthSummary synthesize_full(const SynthOptions& o, const std::string& tokenizer,
                             const std::string& tokenizer_config) {
  const SynthShape& s = o.shape;
  std::vector<TensorSpec> all;
  for (auto& t : synth_base_tensors(s))
    if (t.name.starts_with(kLm))
      all.push_back({t.name.substr(std::string_view(kLm).size()), DType::kBF16, t.shape});
  const ShardedWeights weights = split_shards(std::move(all), "model");
  StagingDir staging(o.out);
  const std::string ckpt = staging.file("checkpoint");
  make_directory(ckpt);
  Progress progress("synth", weights.total, weights.count);
  write_model_dir(ckpt, full_config_json(s), tokenizer, tokenizer_config, weights, o.seed,
                  progress);
  write_head(ckpt + "/head.pt", o, true);
  staging.publish();
  return {s.vocab, weights.count, 0, weights.total};
}

}  // namespace

bool is_full_attention_layer(int64_t layer) {
  return layer % 4 == 3;
}

SynthShape synth_shape(std::string_view name) {
  SynthShape s;
  s.name = std::string(name);
  if (name == "tiny") {
    s.hidden = 64, s.intermediate = 96, s.layers = 32, s.heads = 4, s.kv_heads = 2, s.head_dim = 16;
    s.linear_key_heads = 2, s.linear_value_heads = 4, s.linear_key_dim = 8, s.linear_value_dim = 8;
    s.vocab = 0, s.pointer = 32;
  } else if (name == "tiny-0.8b" || name == "tiny-27b") {
    // Tiny widths at the depth and head ratios of Kev-0.8B (24 layers, attention 8/2, GDN
    // 16/16) or Kev-27B (64 layers, attention 24/4, GDN 16/48): the LoRA inventory, which
    // depends only on depth and layer kinds, is the member's (186 or 496 targets).
    const bool big = name == "tiny-27b";
    s.hidden = 64, s.intermediate = 96, s.layers = big ? 64 : 24, s.heads = big ? 6 : 4,
    s.kv_heads = 1, s.head_dim = 16;
    s.linear_key_heads = 2, s.linear_value_heads = big ? 6 : 2, s.linear_key_dim = 8,
    s.linear_value_dim = 8;
    s.vocab = 0, s.pointer = 32;
    if (big) s.weights_dtype = "bf16";
  } else if (name == "0.8b" || name == "4b") {
    static_cast<QwenTextDims&>(s) = *qwen_published_dims(name);
    s.vocab = 248320, s.pointer = 256;
  } else {
    fail(ErrorKind::kBadInput,
         "synth: unknown --shape '{}' (known: tiny, tiny-0.8b, tiny-27b, 0.8b, 4b)", name);
  }
  s.full_attention.clear();  // the layer kinds are is_full_attention_layer's (SynthShape)
  return s;
}

std::vector<std::string> lora_target_modules(const SynthShape& shape) {
  std::vector<std::string> out;
  for (int64_t l = 0; l < shape.layers; ++l)
    for (const auto& t : layer_targets(shape, l)) out.push_back(layer_prefix(l) + t.module);
  return out;
}

std::vector<TensorSpec> synth_base_tensors(const SynthShape& s) {
  const int64_t h = s.hidden;
  std::vector<TensorSpec> t;
  auto bf16 = [&](std::string name, std::vector<int64_t> shape) {
    t.push_back({std::move(name), DType::kBF16, std::move(shape)});
  };
  bf16(std::string(kLm) + "embed_tokens.weight", {s.vocab, h});
  for (int64_t l = 0; l < s.layers; ++l) {
    const std::string p = layer_prefix(l);
    bf16(p + "input_layernorm.weight", {h});
    for (const auto& target : layer_targets(s, l)) {
      if (target.module == "mlp.gate_proj") bf16(p + "post_attention_layernorm.weight", {h});
      bf16(p + target.module + ".weight", {target.out, target.in});
      if (target.module == "self_attn.o_proj") {
        bf16(p + "self_attn.q_norm.weight", {s.head_dim});
        bf16(p + "self_attn.k_norm.weight", {s.head_dim});
      }
      if (target.module == "linear_attn.out_proj") {
        const int64_t conv =
            2 * s.linear_key_heads * s.linear_key_dim + s.linear_value_heads * s.linear_value_dim;
        bf16(p + "linear_attn.conv1d.weight", {conv, 1, kConvKernel});
        t.push_back({p + "linear_attn.A_log", DType::kF32, {s.linear_value_heads}});
        bf16(p + "linear_attn.dt_bias", {s.linear_value_heads});
        t.push_back({p + "linear_attn.norm.weight", DType::kF32, {s.linear_value_dim}});
      }
    }
  }
  bf16(std::string(kLm) + "norm.weight", {h});
  const int64_t vh = kVisionHidden, merged = kVisionHidden * 4;
  bf16("model.visual.patch_embed.proj.weight",
       {vh, 3, kVisionTemporal, kVisionPatch, kVisionPatch});
  bf16("model.visual.patch_embed.proj.bias", {vh});
  bf16("model.visual.blocks.0.norm1.weight", {vh});
  bf16("model.visual.blocks.0.attn.qkv.weight", {3 * vh, vh});
  bf16("model.visual.blocks.0.attn.qkv.bias", {3 * vh});
  bf16("model.visual.blocks.0.attn.proj.weight", {vh, vh});
  bf16("model.visual.blocks.0.norm2.weight", {vh});
  bf16("model.visual.blocks.0.mlp.linear_fc1.weight", {kVisionInter, vh});
  bf16("model.visual.blocks.0.mlp.linear_fc2.weight", {vh, kVisionInter});
  bf16("model.visual.merger.norm.weight", {vh});
  bf16("model.visual.merger.linear_fc1.weight", {merged, merged});
  bf16("model.visual.merger.linear_fc2.weight", {h, merged});
  bf16("mtp.pre_fc_norm_embedding.weight", {h});
  bf16("mtp.pre_fc_norm_hidden.weight", {h});
  bf16("mtp.fc.weight", {h, 2 * h});
  bf16("mtp.layers.0.input_layernorm.weight", {h});
  bf16("mtp.norm.weight", {h});
  return t;
}

SynthSummary synthesize(const SynthOptions& options) {
  SynthOptions o = options;
  SynthShape& s = o.shape;
  std::string tokenizer = o.tokenizer.empty() ? default_tokenizer_json() : read_file(o.tokenizer);
  nlohmann::json tok;
  try {
    tok = nlohmann::json::parse(tokenizer);
  } catch (const nlohmann::json::exception& e) {
    fail(ErrorKind::kBadInput, "{} is not valid JSON: {}", o.tokenizer, e.what());
  }
  const int64_t tokens =
      largest_token_id(tok, o.tokenizer.empty() ? "built-in tokenizer" : o.tokenizer) + 1;
  if (s.vocab == 0) s.vocab = (tokens + 63) / 64 * 64;
  validate(s);
  if (tokens > s.vocab)
    fail(ErrorKind::kBadInput,
         "synth: the tokenizer has ids up to {} but the vocabulary is {}; raise --vocab",
         tokens - 1, s.vocab);

  std::string tokenizer_config;
  if (!o.tokenizer.empty()) {
    auto slash = o.tokenizer.find_last_of('/');
    std::string beside =
        (slash == std::string::npos ? std::string() : o.tokenizer.substr(0, slash + 1)) +
        "tokenizer_config.json";
    if (path_exists(beside)) tokenizer_config = read_file(beside);
  }
  if (tokenizer_config.empty()) tokenizer_config = tokenizer_config_json(tok);
  if (o.form == "full") return synthesize_full(o, tokenizer, tokenizer_config);
  if (o.form != "lora")
    fail(ErrorKind::kBadInput, "synth: --form must be lora or full, got '{}'", o.form);

  const ShardedWeights weights = split_shards(synth_base_tensors(s), "model.safetensors");

  StagingDir staging(o.out);
  const std::string base = staging.file("base"), ckpt = staging.file("checkpoint");
  for (const auto& dir : {base, ckpt}) make_directory(dir);

  std::vector<TensorSpec> adapter;
  for (int64_t l = 0; l < s.layers; ++l)
    for (const auto& t : layer_targets(s, l)) {
      std::string p = "base_model.model.layers." + std::to_string(l) + "." + t.module;
      adapter.push_back({p + ".lora_A.weight", DType::kF32, {s.rank, t.in}});
      adapter.push_back({p + ".lora_B.weight", DType::kF32, {t.out, s.rank}});
    }
  std::sort(adapter.begin(), adapter.end(),
            [](const auto& a, const auto& b) { return a.name < b.name; });
  uint64_t adapter_bytes = 0;
  for (const auto& t : adapter) adapter_bytes += t.nbytes();

  Progress progress("synth", weights.total + adapter_bytes, weights.count + adapter.size());
  write_model_dir(base, config_json(s), tokenizer, tokenizer_config, weights, o.seed, progress);
  write_file_synced(ckpt + "/adapter_config.json", adapter_config_json(s));
  {
    SafetensorsWriter writer(ckpt + "/adapter_model.safetensors", adapter);
    std::vector<uint8_t> buffer;
    for (const auto& t : adapter) {
      // lora_A [r, in] ~ U(-1,1)/sqrt(in) is the generic linear rule; lora_B is ~U(-0.05, 0.05).
      bool is_b = t.name.find(".lora_B.") != std::string::npos;
      generate(t, o.seed, is_b ? uniform(0.05) : dist_for(t), buffer,
               [&](const uint8_t* p, size_t n) { writer.write(p, n); });
      progress.advance(t.nbytes(), 1);
    }
    writer.finish();
  }
  write_head(ckpt + "/head.pt", o, false);
  staging.publish();
  return {s.vocab, weights.count, adapter.size(), weights.total};
}

}  // namespace kev
