#include "kev/export/exporter.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <exception>
#include <filesystem>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "kev/core/error.h"
#include "kev/core/file.h"
#include "kev/core/interrupt.h"
#include "kev/core/progress.h"
#include "kev/core/sha256.h"
#include "kev/core/threads.h"
#include "kev/cpu/merge.h"
#include "kev/export/bundle.h"
#include "kev/export/configs.h"
#include "kev/export/family.h"
#include "kev/export/full_weights.h"
#include "kev/export/inputs.h"
#include "kev/export/inventory.h"
#include "kev/export/recipe.h"
#include "kev/formats/checkpoint_fields.h"
#include "kev/formats/safetensors.h"
#include "kev/formats/torch_checkpoint.h"

namespace kev {
namespace {

using Json = nlohmann::json;

// The manifest's "delimiters": each special token's id, read from the tokenizer.
Json delimiters_json(const Delimiters& d) {
  Json out = Json::object();
  for (const DelimiterToken& t : kDelimiterTokens) out[t.name] = d.*t.id;
  return out;
}

constexpr size_t kChunkBytes = size_t{8} << 20;
constexpr int kBuffers = 3;

// Writes spans to one SafetensorsWriter on its own thread, in submission order, so hashing and
// write() overlap with merging. Spans either borrow a chunk buffer (returned when written) or
// point into an input mapping (whose pages are released once written). The owner must outlive
// this object; the destructor stops and joins the thread. With one worker (KEV_THREADS=1) no
// thread starts and submit() writes in place (the same bytes in the same order).
class AsyncWriter {
 public:
  struct Span {
    const uint8_t* data = nullptr;
    size_t size = 0;
    int buffer = -1;
    const MappedFile* release_from = nullptr;
  };

  explicit AsyncWriter(SafetensorsWriter& out) : out_(out), inline_(default_workers() == 1) {
    for (int i = 0; i < kBuffers; ++i) {
      buffers_.emplace_back(kChunkBytes);
      free_.push_back(i);
    }
    if (!inline_) thread_ = std::thread([this] { loop(); });
  }
  ~AsyncWriter() {
    if (inline_) return;
    {
      std::lock_guard lock(mutex_);
      stop_ = true;
    }
    cv_.notify_all();
    thread_.join();
  }

  // Blocks until a chunk buffer is free.
  int acquire(uint8_t** data) {
    std::unique_lock lock(mutex_);
    cv_.wait(lock, [&] { return !free_.empty() || error_; });
    rethrow_locked();
    int id = free_.front();
    free_.pop_front();
    *data = buffers_[static_cast<size_t>(id)].data();
    return id;
  }

  void submit(Span s) {
    if (inline_) {
      write(s);
      if (s.buffer >= 0) free_.push_back(s.buffer);
      return;
    }
    std::unique_lock lock(mutex_);
    cv_.wait(lock, [&] { return queue_.size() < 4 || error_; });
    rethrow_locked();
    queue_.push_back(s);
    cv_.notify_all();
  }

  void drain() {
    std::unique_lock lock(mutex_);
    cv_.wait(lock, [&] { return (queue_.empty() && !busy_) || error_; });
    rethrow_locked();
  }

 private:
  void rethrow_locked() {
    if (error_) std::rethrow_exception(error_);
  }

  void write(const Span& s) {
    out_.write(s.data, s.size);
    if (s.release_from)
      s.release_from->release_pages(static_cast<size_t>(s.data - s.release_from->data()), s.size);
  }

  void loop() {
    for (;;) {
      Span s;
      {
        std::unique_lock lock(mutex_);
        cv_.wait(lock, [&] { return stop_ || !queue_.empty(); });
        if (stop_ || error_) return;
        s = queue_.front();
        queue_.pop_front();
        busy_ = true;
      }
      try {
        write(s);
      } catch (...) {
        std::lock_guard lock(mutex_);
        error_ = std::current_exception();
      }
      {
        std::lock_guard lock(mutex_);
        busy_ = false;
        if (s.buffer >= 0) free_.push_back(s.buffer);
      }
      cv_.notify_all();
    }
  }

  SafetensorsWriter& out_;
  std::vector<std::vector<uint8_t>> buffers_;
  std::deque<int> free_;
  std::deque<Span> queue_;
  std::mutex mutex_;
  std::condition_variable cv_;
  std::exception_ptr error_;
  bool stop_ = false, busy_ = false;
  const bool inline_;
  std::thread thread_;
};

struct Target {
  const LoraTarget* lora;
  const TensorInfo* a;
  const TensorInfo* b;
};

struct Plan {
  Recipe recipe;
  VerifiedInputs inputs;
  BaseTextConfig config;
  LoraConfig lora;
  BaseIndex index;
  Delimiters delimiters;
  HeadWeights head;
  CheckpointFields fields;
  std::vector<std::unique_ptr<SafetensorsFile>> shards;  // index.shards order
  std::unique_ptr<SafetensorsBuffer> adapter;            // over inputs.contents: the verified bytes
  std::vector<LoraTarget> targets;
  std::map<std::string, Target> by_base_name;
  float scale = 0;
};

// Steps (1)-(3): everything that can refuse, before any output exists.
Plan plan_export(const ExportOptions& o) {
  Plan p;
  p.recipe = load_recipe(o.recipe_path);
  require_fully_pinned(p.recipe, o.recipe_path);
  if (path_exists(o.out_dir))
    fail(ErrorKind::kBadInput, "{} already exists; choose a new output path or remove it first",
         o.out_dir);
  if (o.base_dir.empty())
    fail(ErrorKind::kBadInput,
         "recipe {} is a LoRA checkpoint's: --base (the base model directory the adapter is "
         "merged into) is required",
         o.recipe_path);
  p.inputs = verify_pinned_inputs(p.recipe, o.recipe_path, o.base_dir, o.checkpoint_dir);
  // head.pt's inference fields first: a checkpoint kev cannot run is refused by the field that
  // says so, before its other files (a trained-token adapter, say) trip a later check.
  PyValue head_pt = read_torch_checkpoint_bytes(p.inputs.bytes("checkpoint/head.pt"),
                                                o.checkpoint_dir + "/head.pt");
  p.fields = read_checkpoint_fields(head_pt, o.checkpoint_dir + "/head.pt");
  // Upstream's rule: the files decide the form (an adapter is there) and head.pt must agree.
  if (p.fields.weights != "lora") refuse_form_mismatch(o.checkpoint_dir, p.fields.weights, "lora");

  p.config =
      parse_base_text_config(p.inputs.bytes("base/config.json"), o.base_dir + "/config.json");
  p.index = parse_base_index(p.inputs.bytes("base/model.safetensors.index.json"),
                             o.base_dir + "/model.safetensors.index.json");
  p.delimiters =
      parse_delimiters(p.inputs.bytes("base/tokenizer.json"), o.base_dir + "/tokenizer.json");
  p.lora = parse_lora_config(p.inputs.bytes("checkpoint/adapter_config.json"),
                             o.checkpoint_dir + "/adapter_config.json");
  if (p.lora.rank != p.recipe.rank || p.lora.alpha != p.recipe.alpha)
    fail(ErrorKind::kBadInput,
         "adapter_config.json has r {} and lora_alpha {} but recipe {} "
         "expects rank {} and alpha {}",
         p.lora.rank, p.lora.alpha, o.recipe_path, p.recipe.rank, p.recipe.alpha);
  if (p.fields.lora && *p.fields.lora != p.lora.rank)
    fail(ErrorKind::kBadInput,
         "{}/head.pt says \"lora\" {} but adapter_config.json has r {}; they are not from one "
         "checkpoint",
         o.checkpoint_dir, *p.fields.lora, p.lora.rank);
  // What torch does with `tensor * (alpha / r)`: the Python float is rounded to F32.
  p.scale = static_cast<float>(p.lora.alpha / static_cast<double>(p.lora.rank));

  for (const auto& shard : p.index.shards) {
    if (!p.recipe.base.files.count(shard))
      fail(ErrorKind::kBadInput,
           "the base index uses shard {} but recipe {} does not pin it; "
           "run `kev pin` on a trusted download",
           shard, o.recipe_path);
    p.shards.push_back(std::make_unique<SafetensorsFile>(o.base_dir + "/" + shard));
  }
  // Shards are mapped by path again: make sure each is still the file that was hashed.
  p.inputs.check_unchanged();
  std::map<std::string, const TensorInfo*> base_tensors;
  for (size_t s = 0; s < p.shards.size(); ++s) {
    for (const auto& t : p.shards[s]->tensors()) {
      auto it = p.index.weight_map.find(t.name);
      if (it == p.index.weight_map.end() || it->second != p.index.shards[s])
        fail(ErrorKind::kBadInput, "base shard {} holds {}, which the index {}", p.index.shards[s],
             t.name, it == p.index.weight_map.end() ? "does not list" : "assigns to " + it->second);
      base_tensors[t.name] = &t;
    }
  }
  for (const auto& [name, shard] : p.index.weight_map)
    if (!base_tensors.count(name))
      fail(ErrorKind::kBadInput, "the base index assigns {} to {} but that shard does not hold it",
           name, shard);

  p.targets = expected_targets(p.config, p.lora);
  if (static_cast<int64_t>(p.targets.size()) != p.recipe.targets)
    fail(ErrorKind::kBadInput,
         "config.json and adapter_config.json define {} LoRA targets but "
         "recipe {} expects {}",
         p.targets.size(), o.recipe_path, p.recipe.targets);
  if (const FamilyMember* member = find_member(p.recipe.model))
    check_member_counts(*member, p.targets);
  p.adapter =
      std::make_unique<SafetensorsBuffer>(p.inputs.bytes("checkpoint/adapter_model.safetensors"),
                                          o.checkpoint_dir + "/adapter_model.safetensors");
  check_adapter(
      p.targets, *p.adapter,
      [&](const std::string& n) -> const TensorInfo* {
        auto it = base_tensors.find(n);
        return it == base_tensors.end() ? nullptr : it->second;
      },
      p.lora.rank, o.checkpoint_dir + "/adapter_model.safetensors");
  for (const auto& t : p.targets)
    p.by_base_name[t.base_name] = {&t, &p.adapter->get(t.a_name), &p.adapter->get(t.b_name)};

  p.head = extract_head(head_pt, p.config.hidden, o.checkpoint_dir + "/head.pt");
  return p;
}

std::vector<float> f32_copy(const SafetensorsBuffer& f, const TensorInfo& t) {
  std::vector<float> v(static_cast<size_t>(t.numel()));
  std::memcpy(v.data(), f.data(t), t.nbytes);
  return v;
}

void merge_tensor(const SafetensorsFile& in, const TensorInfo& t, const Target& target,
                  const SafetensorsBuffer& adapter, float scale, int64_t rank,
                  AsyncWriter& writer) {
  const std::vector<float> a = f32_copy(adapter, *target.a);
  const std::vector<float> b = f32_copy(adapter, *target.b);
  const int64_t rows = t.shape[0], cols = t.shape[1];
  // check_adapter refuses empty targets; this guard keeps the division below defined anyway.
  if (rows <= 0 || cols <= 0)
    fail(ErrorKind::kInternal, "{} has shape {}; LoRA targets must be non-empty", t.name,
         shape_string(t.shape));
  const size_t row_bytes = static_cast<size_t>(cols) * 2;
  if (row_bytes > kChunkBytes)
    fail(ErrorKind::kUnsupported, "{}: rows of {} bytes exceed the {}-byte chunk", t.name,
         row_bytes, kChunkBytes);
  const int64_t chunk_rows = static_cast<int64_t>(kChunkBytes / row_bytes);
  const Isa isa = merge_isa();
  const size_t workers = default_workers();
  const uint8_t* w = in.data(t);
  for (int64_t r0 = 0; r0 < rows; r0 += chunk_rows) {
    check_interrupted();
    const int64_t n = std::min(chunk_rows, rows - r0);
    uint8_t* buf = nullptr;
    int id = writer.acquire(&buf);
    const int64_t parts = static_cast<int64_t>(std::min<size_t>(workers, static_cast<size_t>(n)));
    parallel_for(
        static_cast<size_t>(parts),
        [&](size_t part) {
          int64_t lo = n * static_cast<int64_t>(part) / parts,
                  hi = n * static_cast<int64_t>(part + 1) / parts;
          merge_lora_rows(w + static_cast<size_t>(r0 + lo) * row_bytes, b.data() + (r0 + lo) * rank,
                          a.data(), rank, cols, scale, hi - lo,
                          buf + static_cast<size_t>(lo) * row_bytes, isa);
        },
        workers);
    in.file().release_pages(
        static_cast<size_t>(w - in.file().data()) + static_cast<size_t>(r0) * row_bytes,
        static_cast<size_t>(n) * row_bytes);
    writer.submit({buf, static_cast<size_t>(n) * row_bytes, id, nullptr});
  }
}

// Streams one shard into the staging dir; returns its SHA-256.
std::string write_shard(const Plan& p, const SafetensorsFile& in, const std::string& out_path,
                        Progress& progress, size_t& merged) {
  std::vector<TensorSpec> specs;
  for (const auto& t : in.tensors()) specs.push_back({t.name, t.dtype, t.shape});
  SafetensorsWriter out(out_path, specs, in.metadata());
  {
    AsyncWriter writer(out);
    for (const auto& t : in.tensors()) {
      check_interrupted();
      auto target = p.by_base_name.find(t.name);
      if (target != p.by_base_name.end()) {
        merge_tensor(in, t, target->second, *p.adapter, p.scale, p.lora.rank, writer);
        ++merged;
      } else {
        const uint8_t* data = in.data(t);
        for (uint64_t off = 0; off < t.nbytes; off += kChunkBytes) {
          check_interrupted();
          size_t n = static_cast<size_t>(std::min<uint64_t>(kChunkBytes, t.nbytes - off));
          writer.submit({data + off, n, -1, &in.file()});
        }
      }
      progress.advance(t.nbytes, 1);
    }
    writer.drain();
  }
  return out.finish();
}

std::string manifest_json(const Plan& p, const std::map<std::string, std::string>& outputs) {
  Json inputs = Json::object(), outs = Json::object(), merged = Json::array();
  for (const auto& [k, v] : p.inputs.digests) inputs[k] = v;
  for (const auto& [k, v] : outputs) outs[k] = v;
  std::vector<std::string> names;
  for (const auto& t : p.targets) names.push_back(t.base_name);
  std::sort(names.begin(), names.end());
  for (const auto& n : names) merged.push_back(n);
  Json lora = {{"rank", p.lora.rank}, {"scale", static_cast<double>(p.scale)}};
  if (p.lora.alpha == std::floor(p.lora.alpha))
    lora["alpha"] = static_cast<int64_t>(p.lora.alpha);
  else
    lora["alpha"] = p.lora.alpha;
  Json m = {
      {"format", kBundleFormat},
      {"model", p.recipe.model},
      {"weights", "lora"},
      // upstream's provenance digest of a LoRA checkpoint: its adapter file's SHA-256
      {"weights_sha256", p.inputs.digests.at("checkpoint/adapter_model.safetensors")},
      {"base", {{"repo", p.recipe.base.repo}, {"revision", p.recipe.base.revision}}},
      {"checkpoint",
       {{"repo", p.recipe.checkpoint.repo}, {"revision", p.recipe.checkpoint.revision}}},
      {"reference", {{"repo", p.recipe.reference_repo}, {"revision", p.recipe.reference_revision}}},
      {"inputs", inputs},
      {"outputs", outs},
      {"merged_targets", merged},
      {"lora", lora},
      {"dtypes",
       {{"weights", "BF16"},
        {"merged_targets", "BF16"},
        {"merge_compute", "F32"},
        {"head", "F32"}}},
      {"dimensions",
       {{"hidden", p.config.hidden}, {"layers", p.config.layers}, {"pointer", p.head.pointer}}},
      {"temperature", p.head.temperature},
      {"checkpoint_fields", checkpoint_fields_json(p.fields)},
      {"delimiters", delimiters_json(p.delimiters)},
      {"producer", {{"name", kProducerName}, {"version", KEV_VERSION}}},
  };
  return m.dump(2) + "\n";
}

// ---- full-weight checkpoints: nothing is merged, every byte reaches the bundle unchanged ----

struct FullPlan {
  Recipe recipe;
  VerifiedInputs inputs;
  FullConfig config;
  BaseIndex index;
  Delimiters delimiters;
  HeadWeights head;
  CheckpointFields fields;
  std::vector<std::unique_ptr<SafetensorsFile>> shards;  // index.shards order
  std::string weights_sha256;
};

// model*.safetensors files of `dir` that the index does not name: upstream's loader and its
// weights_sha256 take every such file, so a checkpoint that holds one is not what the recipe pins.
void refuse_unindexed_shards(const std::string& dir, const BaseIndex& index) {
  std::error_code ec;
  for (const auto& e : std::filesystem::directory_iterator(dir, ec)) {
    const std::string n = e.path().filename().string();
    if (n.starts_with("model") && n.ends_with(".safetensors") &&
        !std::binary_search(index.shards.begin(), index.shards.end(), n))
      fail(ErrorKind::kBadInput,
           "{}: {} is not named by model.safetensors.index.json; upstream loads and hashes every "
           "model*.safetensors of a full-weight checkpoint, so remove it or fix the index",
           dir, n);
  }
}

FullPlan plan_full_export(const ExportOptions& o, Recipe recipe) {
  FullPlan p;
  p.recipe = std::move(recipe);
  // Upstream's rule: adapter files make a checkpoint a LoRA one, whatever head.pt says.
  if (checkpoint_form_from_files(o.checkpoint_dir) == "lora")
    fail(ErrorKind::kBadInput,
         "{} holds adapter_config.json, a LoRA checkpoint, but recipe {} is a full-weight one "
         "(\"weights\": \"full\"); they are not one checkpoint",
         o.checkpoint_dir, o.recipe_path);
  p.inputs = verify_pinned_inputs(p.recipe, o.recipe_path, o.base_dir, o.checkpoint_dir);
  const std::string head_path = o.checkpoint_dir + "/head.pt";
  PyValue head_pt = read_torch_checkpoint_bytes(p.inputs.bytes("checkpoint/head.pt"), head_path);
  p.fields = read_checkpoint_fields(head_pt, head_path);
  if (p.fields.weights != "full") refuse_form_mismatch(o.checkpoint_dir, p.fields.weights, "full");
  p.config = parse_full_config(p.inputs.bytes("checkpoint/config.json"),
                               o.checkpoint_dir + "/config.json");
  p.index = parse_base_index(p.inputs.bytes("checkpoint/model.safetensors.index.json"),
                             o.checkpoint_dir + "/model.safetensors.index.json");
  p.delimiters = parse_delimiters(p.inputs.bytes("checkpoint/tokenizer.json"),
                                  o.checkpoint_dir + "/tokenizer.json");
  if (const FamilyMember* m = find_member(p.recipe.model); m && m->weights == "full") {
    if (p.config.text.full_attention != m->config.full_attention)
      fail(ErrorKind::kBadInput,
           "{}/config.json has {} layers of another layout than {} ({} layers, full attention "
           "on every fourth); it is not that member's checkpoint",
           o.checkpoint_dir, p.config.text.layers, m->display, m->config.layers);
  }
  refuse_unindexed_shards(o.checkpoint_dir, p.index);
  std::map<std::string, std::string> shard_digests;
  std::vector<const SafetensorsFile*> opened;
  for (const auto& shard : p.index.shards) {
    if (!p.recipe.checkpoint.files.count(shard))
      fail(ErrorKind::kBadInput,
           "the checkpoint index uses shard {} but recipe {} does not pin it; run `kev pin` on a "
           "trusted download",
           shard, o.recipe_path);
    p.shards.push_back(std::make_unique<SafetensorsFile>(o.checkpoint_dir + "/" + shard));
    opened.push_back(p.shards.back().get());
    shard_digests[shard] = p.inputs.digests.at("checkpoint/" + shard);
  }
  p.inputs.check_unchanged();
  for (size_t s = 0; s < p.shards.size(); ++s)
    for (const auto& t : p.shards[s]->tensors()) {
      auto it = p.index.weight_map.find(t.name);
      if (it == p.index.weight_map.end() || it->second != p.index.shards[s])
        fail(ErrorKind::kBadInput, "checkpoint shard {} holds {}, which the index {}",
             p.index.shards[s], t.name,
             it == p.index.weight_map.end() ? "does not list" : "assigns to " + it->second);
    }
  check_full_tensors(p.config, opened, p.index.shards, o.checkpoint_dir);
  for (const auto& [name, shard] : p.index.weight_map) {
    auto at = std::lower_bound(p.index.shards.begin(), p.index.shards.end(), shard);
    if (!p.shards[static_cast<size_t>(at - p.index.shards.begin())]->find(name))
      fail(ErrorKind::kBadInput, "the checkpoint index assigns {} to {} but that shard lacks it",
           name, shard);
  }
  p.weights_sha256 = full_weights_sha256(shard_digests);
  p.head = extract_head(head_pt, p.config.text.hidden, head_path);
  return p;
}

// Copies a verified shard byte for byte from its mapping, hashing what is written; the result
// must be the pinned digest (a file changed between hashing and copying is refused).
std::string copy_shard(const SafetensorsFile& in, const std::string& out_path,
                       const std::string& pinned, Progress& progress) {
  const MappedFile& f = in.file();
  OutputFile out(out_path);
  Sha256 hash;
  for (size_t off = 0; off < f.size(); off += kChunkBytes) {
    check_interrupted();
    const size_t n = std::min(kChunkBytes, f.size() - off);
    hash.update(f.data() + off, n);
    out.write(f.data() + off, n);
    f.release_pages(off, n);
    progress.advance(n, 0);
  }
  out.close_synced();
  std::string digest = hash.hex();
  if (digest != pinned)
    fail(ErrorKind::kIntegrity,
         "{} changed after it was verified (SHA-256 {} while copying, {} pinned); nothing was "
         "published",
         in.path(), digest, pinned);
  progress.advance(0, in.tensors().size());
  return digest;
}

std::string full_manifest_json(const FullPlan& p,
                               const std::map<std::string, std::string>& outputs) {
  Json inputs = Json::object(), outs = Json::object();
  for (const auto& [k, v] : p.inputs.digests) inputs[k] = v;
  for (const auto& [k, v] : outputs) outs[k] = v;
  Json m = {
      {"format", kBundleFormat},
      {"model", p.recipe.model},
      {"weights", "full"},
      {"weights_sha256", p.weights_sha256},
      {"base", {{"repo", p.recipe.base.repo}, {"revision", p.recipe.base.revision}}},
      {"checkpoint",
       {{"repo", p.recipe.checkpoint.repo}, {"revision", p.recipe.checkpoint.revision}}},
      {"reference", {{"repo", p.recipe.reference_repo}, {"revision", p.recipe.reference_revision}}},
      {"inputs", inputs},
      {"outputs", outs},
      {"dtypes", {{"weights", "BF16"}, {"head", "F32"}}},
      {"dimensions",
       {{"hidden", p.config.text.hidden},
        {"layers", p.config.text.layers},
        {"pointer", p.head.pointer}}},
      {"temperature", p.head.temperature},
      {"checkpoint_fields", checkpoint_fields_json(p.fields)},
      {"delimiters", delimiters_json(p.delimiters)},
      {"producer", {{"name", kProducerName}, {"version", KEV_VERSION}}},
  };
  if (p.recipe.base.revision.empty()) m["base"]["revision"] = nullptr;
  return m.dump(2) + "\n";
}

ExportSummary run_full_export(const ExportOptions& o, Recipe recipe,
                              std::chrono::steady_clock::time_point start) {
  FullPlan p = plan_full_export(o, std::move(recipe));
  StagingDir staging(o.out_dir);
  std::map<std::string, std::string> outputs;
  uint64_t total = 0, tensors = 0;
  for (const auto& s : p.shards) {
    total += s->file().size();
    tensors += s->tensors().size();
  }
  {
    Progress progress("export", total, tensors);
    for (size_t s = 0; s < p.shards.size(); ++s) {
      const std::string& name = p.index.shards[s];
      outputs[name] = copy_shard(*p.shards[s], staging.file(name),
                                 p.inputs.digests.at("checkpoint/" + name), progress);
    }
  }
  check_interrupted();
  outputs[kHeadFile] = write_head_safetensors(staging.file(kHeadFile), p.head);
  for (const char* name : {"config.json", "tokenizer.json", "tokenizer_config.json", kIndexFile}) {
    const std::string& bytes = p.inputs.bytes(std::string("checkpoint/") + name);
    write_file_synced(staging.file(name), bytes);
    outputs[name] = sha256_hex(bytes);
  }
  check_interrupted();
  write_file_synced(staging.file(kManifestFile), full_manifest_json(p, outputs));
  check_interrupted();
  p.inputs.check_unchanged();
  staging.publish();

  ExportSummary sum;
  sum.out_dir = o.out_dir;
  sum.model = p.recipe.model;
  sum.merge_isa = "none";
  sum.tensors = tensors;
  sum.shards = p.shards.size();
  sum.input_bytes = p.inputs.total_bytes;
  for (const auto& entry : std::filesystem::directory_iterator(o.out_dir))
    sum.output_bytes += entry.file_size();
  sum.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return sum;
}

}  // namespace

ExportSummary run_export(const ExportOptions& o) {
  auto start = std::chrono::steady_clock::now();
  {
    Recipe recipe = load_recipe(o.recipe_path);
    if (recipe.weights == "full") {
      require_fully_pinned(recipe, o.recipe_path);
      if (path_exists(o.out_dir))
        fail(ErrorKind::kBadInput, "{} already exists; choose a new output path or remove it first",
             o.out_dir);
      return run_full_export(o, std::move(recipe), start);
    }
  }
  Plan p = plan_export(o);

  StagingDir staging(o.out_dir);
  std::map<std::string, std::string> outputs;
  uint64_t total = 0, tensors = 0;
  for (const auto& s : p.shards) {
    total += s->file().size();
    tensors += s->tensors().size();
  }
  size_t merged = 0;
  {
    Progress progress("export", total, tensors);
    for (size_t s = 0; s < p.shards.size(); ++s)
      outputs[p.index.shards[s]] =
          write_shard(p, *p.shards[s], staging.file(p.index.shards[s]), progress, merged);
  }
  if (merged != p.targets.size())
    fail(ErrorKind::kInternal, "merged {} of {} targets", merged, p.targets.size());
  check_interrupted();
  outputs[kHeadFile] = write_head_safetensors(staging.file(kHeadFile), p.head);
  for (const char* name : kCopiedBaseFiles) {
    const std::string& bytes = p.inputs.bytes(std::string("base/") + name);
    write_file_synced(staging.file(name), bytes);
    outputs[name] = sha256_hex(bytes);
  }
  uint64_t total_size = 0;
  for (const auto& s : p.shards)
    for (const auto& t : s->tensors()) total_size += t.nbytes;
  Json wm = Json::object();
  for (const auto& [k, v] : p.index.weight_map) wm[k] = v;
  std::string index =
      Json{{"metadata", {{"total_size", total_size}}}, {"weight_map", wm}}.dump(2) + "\n";
  write_file_synced(staging.file(kIndexFile), index);
  outputs[kIndexFile] = sha256_hex(index);
  check_interrupted();
  std::string manifest = manifest_json(p, outputs);
  write_file_synced(staging.file(kManifestFile), manifest);
  check_interrupted();
  // The shards were read from disk after hashing: refuse if any was replaced or modified since.
  p.inputs.check_unchanged();
  staging.publish();

  ExportSummary sum;
  sum.out_dir = o.out_dir;
  sum.model = p.recipe.model;
  sum.merge_isa = isa_name(merge_isa());
  sum.merged_targets = merged;
  sum.tensors = tensors;
  sum.shards = p.shards.size();
  sum.input_bytes = p.inputs.total_bytes;
  for (const auto& entry : std::filesystem::directory_iterator(o.out_dir))
    sum.output_bytes += entry.file_size();
  sum.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return sum;
}

}  // namespace kev
