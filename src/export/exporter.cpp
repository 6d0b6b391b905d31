// The export pipeline (exporter.h): one for every form of checkpoint; what differs between the
// forms is behind the WeightsSource seam (weights_source.h).
#include "kev/export/exporter.h"

#include <nlohmann/json.hpp>

#include <chrono>
#include <filesystem>
#include <map>
#include <memory>
#include <string>

#include "export/weights_source.h"
#include "kev/core/error.h"
#include "kev/core/file.h"
#include "kev/core/interrupt.h"
#include "kev/core/progress.h"
#include "kev/core/sha256.h"
#include "kev/export/bundle.h"
#include "kev/export/recipe.h"
#include "kev/formats/bundle_manifest.h"
#include "kev/formats/checkpoint_fields.h"

namespace kev {
namespace {

using Json = nlohmann::json;

// Step (1): the recipe, fully pinned, and an output path that does not exist yet; then the
// planner of the recipe's form.
std::unique_ptr<WeightsSource> plan(const ExportOptions& o) {
  Recipe recipe = load_recipe(o.recipe_path);
  require_fully_pinned(recipe, o.recipe_path);
  if (path_exists(o.out_dir))
    fail(ErrorKind::kBadInput, "{} already exists; choose a new output path or remove it first",
         o.out_dir);
  if (recipe.weights == "full") return plan_full_source(o, std::move(recipe));
  return plan_lora_source(o, std::move(recipe));
}

// The manifest's "delimiters": each special token's id, read from the tokenizer.
Json delimiters_json(const Delimiters& d) {
  Json out = Json::object();
  for (const DelimiterToken& t : kDelimiterTokens) out[t.name] = d.*t.id;
  return out;
}

// The manifest: the fields every bundle has, and the source's own.
std::string manifest_json(const WeightsSource& source,
                          const std::map<std::string, std::string>& outputs) {
  const PlannedInputs& p = source.inputs();
  Json inputs = Json::object(), outs = Json::object();
  for (const auto& [k, v] : p.inputs.digests) inputs[k] = v;
  for (const auto& [k, v] : outputs) outs[k] = v;
  const Recipe& r = p.recipe;
  Json m = {
      {"format", kBundleFormat},
      {"model", r.model},
      {"base",
       {{"repo", r.base.repo},
        {"revision", r.base.revision.empty() ? Json(nullptr) : Json(r.base.revision)}}},
      {"checkpoint", {{"repo", r.checkpoint.repo}, {"revision", r.checkpoint.revision}}},
      {"reference", {{"repo", r.reference_repo}, {"revision", r.reference_revision}}},
      {"inputs", inputs},
      {"outputs", outs},
      {"dimensions", {{"hidden", p.hidden}, {"layers", p.layers}, {"pointer", p.head.pointer}}},
      {"temperature", p.head.temperature},
      {"checkpoint_fields", checkpoint_fields_json(p.fields)},
      {"delimiters", delimiters_json(p.delimiters)},
      {"producer", {{"name", kProducerName}, {"version", KEV_VERSION}}},
  };
  m.update(source.manifest_fields());
  return m.dump(2) + "\n";
}

// Step (4): every output into a staging directory beside out, the manifest last, then the
// inputs checked once more (the shards were read from disk after hashing) and the directory
// renamed into place. Returns the tensors written.
uint64_t write_bundle(WeightsSource& source, const std::string& out_dir) {
  const PlannedInputs& p = source.inputs();
  StagingDir staging(out_dir);
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
      outputs[name] = source.write_shard(s, staging.file(name), progress);
    }
  }
  source.check_shards_written();
  check_interrupted();
  outputs[kHeadFile] = write_head_safetensors(staging.file(kHeadFile), p.head);
  for (const auto& [name, bytes] : source.small_files()) {
    write_file_synced(staging.file(name), bytes);
    outputs[name] = sha256_hex(bytes);
  }
  check_interrupted();
  write_file_synced(staging.file(kManifestFile), manifest_json(source, outputs));
  check_interrupted();
  p.inputs.check_unchanged();
  staging.publish();
  return tensors;
}

}  // namespace

ExportSummary run_export(const ExportOptions& o) {
  const auto start = std::chrono::steady_clock::now();
  std::unique_ptr<WeightsSource> source = plan(o);
  const uint64_t tensors = write_bundle(*source, o.out_dir);
  const PlannedInputs& p = source->inputs();
  ExportSummary sum;
  sum.out_dir = o.out_dir;
  sum.model = p.recipe.model;
  sum.merge_isa = source->merge_isa_name();
  sum.merged_targets = source->merged_targets();
  sum.tensors = tensors;
  sum.shards = p.shards.size();
  sum.input_bytes = p.inputs.total_bytes;
  for (const auto& entry : std::filesystem::directory_iterator(o.out_dir))
    sum.output_bytes += entry.file_size();
  sum.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return sum;
}

}  // namespace kev
