// The full-weight source (weights_source.h): a checkpoint that carries all its weights (export/
// full_weights.h). Nothing is merged: planning checks its config, index, shards and head as
// upstream checks them; writing copies each shard byte for byte from its verified mapping,
// hashing what it writes (a digest other than the pinned one refuses the export), and the small
// files are the verified bytes.
#include <algorithm>
#include <filesystem>

#include "export/async_writer.h"
#include "export/weights_source.h"
#include "kev/core/error.h"
#include "kev/core/file.h"
#include "kev/core/interrupt.h"
#include "kev/core/sha256.h"
#include "kev/export/family.h"
#include "kev/export/full_weights.h"
#include "kev/formats/torch_checkpoint.h"

namespace kev {
namespace {

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

// The small files of a full-weight bundle, the checkpoint's own.
constexpr const char* kFullSmallFiles[] = {"config.json", "tokenizer.json", "tokenizer_config.json",
                                           kIndexFile};

class FullSource final : public WeightsSource {
 public:
  FullSource(const ExportOptions& o, Recipe recipe) {
    in_.recipe = std::move(recipe);
    // Upstream's rule: adapter files make a checkpoint a LoRA one, whatever head.pt says.
    if (checkpoint_form_from_files(o.checkpoint_dir) == "lora")
      fail(ErrorKind::kBadInput,
           "{} holds adapter_config.json, a LoRA checkpoint, but recipe {} is a full-weight one "
           "(\"weights\": \"full\"); they are not one checkpoint",
           o.checkpoint_dir, o.recipe_path);
    in_.inputs = verify_pinned_inputs(in_.recipe, o.recipe_path, o.base_dir, o.checkpoint_dir);
    const PyValue head_pt = read_head_fields(in_, o.checkpoint_dir, "full");
    parse_configs(o);
    refuse_unindexed_shards(o.checkpoint_dir, in_.index);
    open_indexed_shards(in_, o.checkpoint_dir, "checkpoint", o.recipe_path);
    std::vector<const SafetensorsFile*> opened;
    std::map<std::string, std::string> shard_digests;
    for (size_t s = 0; s < in_.shards.size(); ++s) {
      opened.push_back(in_.shards[s].get());
      shard_digests[in_.index.shards[s]] = pinned(s);
    }
    check_full_tensors(config_, opened, in_.index.shards, o.checkpoint_dir);
    weights_sha256_ = full_weights_sha256(shard_digests);
    in_.head = extract_head(head_pt, config_.text.hidden, o.checkpoint_dir + "/head.pt");
  }

  // Copies a verified shard byte for byte from its mapping, hashing what is written; the result
  // must be the pinned digest (a file changed between hashing and copying is refused).
  std::string write_shard(size_t s, const std::string& out_path, Progress& progress) override {
    const SafetensorsFile& in = *in_.shards[s];
    const MappedFile& f = in.file();
    OutputFile out(out_path);
    Sha256 hash;
    for (size_t off = 0; off < f.size(); off += kExportChunkBytes) {
      check_interrupted();
      const size_t n = std::min(kExportChunkBytes, f.size() - off);
      hash.update(f.data() + off, n);
      out.write(f.data() + off, n);
      f.release_pages(off, n);
      progress.advance(n, 0);
    }
    out.close_synced();
    std::string digest = hash.hex();
    if (digest != pinned(s))
      fail(ErrorKind::kIntegrity,
           "{} changed after it was verified (SHA-256 {} while copying, {} pinned); nothing was "
           "published",
           in.path(), digest, pinned(s));
    progress.advance(0, in.tensors().size());
    return digest;
  }

  std::vector<std::pair<std::string, std::string>> small_files() const override {
    std::vector<std::pair<std::string, std::string>> out;
    for (const char* name : kFullSmallFiles)
      out.emplace_back(name, in_.inputs.bytes(std::string("checkpoint/") + name));
    return out;
  }

  nlohmann::json manifest_fields() const override {
    return {{"weights", "full"},
            {"weights_sha256", weights_sha256_},
            {"dtypes", {{"weights", "BF16"}, {"head", "F32"}}}};
  }

  std::string merge_isa_name() const override { return "none"; }

 private:
  const std::string& pinned(size_t s) const {
    return in_.inputs.digests.at("checkpoint/" + in_.index.shards[s]);
  }

  // The checkpoint's config, index and tokenizer; a family member's layout where the recipe
  // names one.
  void parse_configs(const ExportOptions& o) {
    const VerifiedInputs& v = in_.inputs;
    config_ =
        parse_full_config(v.bytes("checkpoint/config.json"), o.checkpoint_dir + "/config.json");
    in_.hidden = config_.text.hidden;
    in_.layers = config_.text.layers;
    in_.index = parse_base_index(v.bytes("checkpoint/model.safetensors.index.json"),
                                 o.checkpoint_dir + "/model.safetensors.index.json");
    in_.delimiters = parse_delimiters(v.bytes("checkpoint/tokenizer.json"),
                                      o.checkpoint_dir + "/tokenizer.json");
    if (const FamilyMember* m = find_member(in_.recipe.model); m && m->weights == "full") {
      if (!has_member_layout(*m, config_.text))
        fail(ErrorKind::kBadInput,
             "{}/config.json has {} layers of another layout than {} ({} layers, full attention "
             "on every fourth); it is not that member's checkpoint",
             o.checkpoint_dir, config_.text.layers, m->display, m->config.layers);
    }
  }

  FullConfig config_;
  std::string weights_sha256_;
};

}  // namespace

std::unique_ptr<WeightsSource> plan_full_source(const ExportOptions& o, Recipe recipe) {
  return std::make_unique<FullSource>(o, std::move(recipe));
}

}  // namespace kev
