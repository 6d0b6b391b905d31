// The LoRA source (weights_source.h): a base model and an adapter, merged. Planning checks the
// adapter against the recipe and the base (inventory.h) and reads head.pt; writing streams each
// base shard tensor by tensor, every target merged to BF16 on all cores (cpu/merge.h) and every
// other tensor copied byte for byte from the mapping.
#include <algorithm>
#include <cmath>
#include <cstring>

#include "export/async_writer.h"
#include "export/weights_source.h"
#include "kev/core/error.h"
#include "kev/core/interrupt.h"
#include "kev/core/threads.h"
#include "kev/cpu/merge.h"
#include "kev/export/family.h"
#include "kev/export/full_weights.h"
#include "kev/export/inventory.h"
#include "kev/formats/torch_checkpoint.h"

namespace kev {
namespace {

using Json = nlohmann::json;

struct Target {
  const LoraTarget* lora;
  const TensorInfo* a;
  const TensorInfo* b;
};

std::vector<float> f32_copy(const SafetensorsView& f, const TensorInfo& t) {
  std::vector<float> v(static_cast<size_t>(t.numel()));
  std::memcpy(v.data(), f.data(t), t.nbytes);
  return v;
}

// Target tensor t of `in` merged with its factors, W + scale * B A, in chunks of rows.
void merge_tensor(const SafetensorsFile& in, const TensorInfo& t, const Target& target,
                  const SafetensorsView& adapter, float scale, int64_t rank, AsyncWriter& writer) {
  const std::vector<float> a = f32_copy(adapter, *target.a);
  const std::vector<float> b = f32_copy(adapter, *target.b);
  const int64_t rows = t.shape[0], cols = t.shape[1];
  // check_adapter refuses empty targets; this guard keeps the division below defined anyway.
  if (rows <= 0 || cols <= 0)
    fail(ErrorKind::kInternal, "{} has shape {}; LoRA targets must be non-empty", t.name,
         shape_string(t.shape));
  const size_t row_bytes = static_cast<size_t>(cols) * 2;
  if (row_bytes > kExportChunkBytes)
    fail(ErrorKind::kUnsupported, "{}: rows of {} bytes exceed the {}-byte chunk", t.name,
         row_bytes, kExportChunkBytes);
  const int64_t chunk_rows = static_cast<int64_t>(kExportChunkBytes / row_bytes);
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

class LoraSource final : public WeightsSource {
 public:
  LoraSource(const ExportOptions& o, Recipe recipe) {
    in_.recipe = std::move(recipe);
    if (o.base_dir.empty())
      fail(ErrorKind::kBadInput,
           "recipe {} is a LoRA checkpoint's: --base (the base model directory the adapter is "
           "merged into) is required",
           o.recipe_path);
    in_.inputs = verify_pinned_inputs(in_.recipe, o.recipe_path, o.base_dir, o.checkpoint_dir);
    // head.pt's inference fields first: a checkpoint kev cannot run is refused by the field
    // that says so, before its other files (a trained-token adapter, say) trip a later check.
    // Upstream's rule: the files decide the form (an adapter is there) and head.pt must agree.
    const PyValue head_pt = read_head_fields(in_, o.checkpoint_dir, "lora");
    parse_configs(o);
    const auto base_tensors = open_indexed_shards(in_, o.base_dir, "base", o.recipe_path);
    plan_targets(o, base_tensors);
    in_.head = extract_head(head_pt, config_.hidden, o.checkpoint_dir + "/head.pt");
  }

  std::string write_shard(size_t s, const std::string& out_path, Progress& progress) override {
    const SafetensorsFile& in = *in_.shards[s];
    std::vector<TensorSpec> specs;
    for (const auto& t : in.tensors()) specs.push_back({t.name, t.dtype, t.shape});
    SafetensorsWriter out(out_path, specs, in.metadata());
    {
      AsyncWriter writer(out);
      for (const auto& t : in.tensors()) {
        check_interrupted();
        auto target = by_base_name_.find(t.name);
        if (target != by_base_name_.end()) {
          merge_tensor(in, t, target->second, *adapter_, scale_, lora_.rank, writer);
          ++merged_;
        } else {
          copy_tensor(in, t, writer);
        }
        progress.advance(t.nbytes, 1);
      }
      writer.drain();
    }
    return out.finish();
  }

  void check_shards_written() const override {
    if (merged_ != targets_.size())
      fail(ErrorKind::kInternal, "merged {} of {} targets", merged_, targets_.size());
  }

  // The base's small files byte for byte, and an index of the merged shards.
  std::vector<std::pair<std::string, std::string>> small_files() const override {
    std::vector<std::pair<std::string, std::string>> out;
    for (const char* name : kCopiedBaseFiles)
      out.emplace_back(name, in_.inputs.bytes(std::string("base/") + name));
    uint64_t total_size = 0;
    for (const auto& s : in_.shards)
      for (const auto& t : s->tensors()) total_size += t.nbytes;
    Json wm = Json::object();
    for (const auto& [k, v] : in_.index.weight_map) wm[k] = v;
    out.emplace_back(
        kIndexFile,
        Json{{"metadata", {{"total_size", total_size}}}, {"weight_map", wm}}.dump(2) + "\n");
    return out;
  }

  Json manifest_fields() const override {
    Json merged = Json::array();
    std::vector<std::string> names;
    for (const auto& t : targets_) names.push_back(t.base_name);
    std::sort(names.begin(), names.end());
    for (const auto& n : names) merged.push_back(n);
    Json lora = {{"rank", lora_.rank}, {"scale", static_cast<double>(scale_)}};
    if (lora_.alpha == std::floor(lora_.alpha))
      lora["alpha"] = static_cast<int64_t>(lora_.alpha);
    else
      lora["alpha"] = lora_.alpha;
    return {
        {"weights", "lora"},
        // upstream's provenance digest of a LoRA checkpoint: its adapter file's SHA-256
        {"weights_sha256", in_.inputs.digests.at("checkpoint/adapter_model.safetensors")},
        {"merged_targets", merged},
        {"lora", lora},
        {"dtypes",
         {{"weights", "BF16"},
          {"merged_targets", "BF16"},
          {"merge_compute", "F32"},
          {"head", "F32"}}},
    };
  }

  std::string merge_isa_name() const override { return isa_name(merge_isa()); }
  size_t merged_targets() const override { return merged_; }

 private:
  // The base's config, index and tokenizer and the adapter's config, against the recipe.
  void parse_configs(const ExportOptions& o) {
    const VerifiedInputs& v = in_.inputs;
    config_ = parse_base_text_config(v.bytes("base/config.json"), o.base_dir + "/config.json");
    in_.hidden = config_.hidden;
    in_.layers = config_.layers;
    in_.index = parse_base_index(v.bytes("base/model.safetensors.index.json"),
                                 o.base_dir + "/model.safetensors.index.json");
    in_.delimiters =
        parse_delimiters(v.bytes("base/tokenizer.json"), o.base_dir + "/tokenizer.json");
    lora_ = parse_lora_config(v.bytes("checkpoint/adapter_config.json"),
                              o.checkpoint_dir + "/adapter_config.json");
    const Recipe& r = in_.recipe;
    if (lora_.rank != r.rank || lora_.alpha != r.alpha)
      fail(ErrorKind::kBadInput,
           "adapter_config.json has r {} and lora_alpha {} but recipe {} "
           "expects rank {} and alpha {}",
           lora_.rank, lora_.alpha, o.recipe_path, r.rank, r.alpha);
    if (in_.fields.lora && *in_.fields.lora != lora_.rank)
      fail(ErrorKind::kBadInput,
           "{}/head.pt says \"lora\" {} but adapter_config.json has r {}; they are not from one "
           "checkpoint",
           o.checkpoint_dir, *in_.fields.lora, lora_.rank);
    // What torch does with `tensor * (alpha / r)`: the Python float is rounded to F32.
    scale_ = static_cast<float>(lora_.alpha / static_cast<double>(lora_.rank));
  }

  // The LoRA inventory: the targets the configs define, against the recipe, the family member
  // and the adapter's tensors.
  void plan_targets(const ExportOptions& o,
                    const std::map<std::string, const TensorInfo*>& base_tensors) {
    targets_ = expected_targets(config_, lora_);
    if (static_cast<int64_t>(targets_.size()) != in_.recipe.targets)
      fail(ErrorKind::kBadInput,
           "config.json and adapter_config.json define {} LoRA targets but "
           "recipe {} expects {}",
           targets_.size(), o.recipe_path, in_.recipe.targets);
    if (const FamilyMember* member = find_member(in_.recipe.model))
      check_member_counts(*member, targets_);
    const std::string adapter_path = o.checkpoint_dir + "/adapter_model.safetensors";
    adapter_ = std::make_unique<SafetensorsView>(
        in_.inputs.bytes("checkpoint/adapter_model.safetensors"), adapter_path);
    check_adapter(
        targets_, *adapter_,
        [&](const std::string& n) -> const TensorInfo* {
          auto it = base_tensors.find(n);
          return it == base_tensors.end() ? nullptr : it->second;
        },
        lora_.rank, adapter_path);
    for (const auto& t : targets_)
      by_base_name_[t.base_name] = {&t, &adapter_->get(t.a_name), &adapter_->get(t.b_name)};
  }

  static void copy_tensor(const SafetensorsFile& in, const TensorInfo& t, AsyncWriter& writer) {
    const uint8_t* data = in.data(t);
    for (uint64_t off = 0; off < t.nbytes; off += kExportChunkBytes) {
      check_interrupted();
      size_t n = static_cast<size_t>(std::min<uint64_t>(kExportChunkBytes, t.nbytes - off));
      writer.submit({data + off, n, -1, &in.file()});
    }
  }

  BaseTextConfig config_;
  LoraConfig lora_;
  std::unique_ptr<SafetensorsView> adapter_;  // over in_.inputs.contents: the verified bytes
  std::vector<LoraTarget> targets_;
  std::map<std::string, Target> by_base_name_;
  float scale_ = 0;
  size_t merged_ = 0;
};

}  // namespace

std::unique_ptr<WeightsSource> plan_lora_source(const ExportOptions& o, Recipe recipe) {
  return std::make_unique<LoraSource>(o, std::move(recipe));
}

}  // namespace kev
