// The seam of the export pipeline (private to the export layer). A weights source is one form
// of released checkpoint on its way into a bundle: a LoRA adapter merged into its base
// (lora_source.cpp) or full weights copied byte for byte (full_source.cpp). A source is made by
// its planner, which verifies and parses every input and refuses what kev cannot export before
// any output exists (steps (2)-(3) of exporter.h); then it writes each shard and names the
// small files and the manifest fields of its form. The pipeline (exporter.cpp) owns all the
// rest, once: the staging directory, progress, head.safetensors, the manifest's common fields,
// the last check that no input changed, the atomic publication and the summary. Another form
// is another source, not another pipeline.
#pragma once
#include <nlohmann/json.hpp>

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "kev/core/progress.h"
#include "kev/export/bundle.h"
#include "kev/export/configs.h"
#include "kev/export/exporter.h"
#include "kev/export/inputs.h"
#include "kev/export/recipe.h"
#include "kev/formats/checkpoint_fields.h"
#include "kev/formats/safetensors.h"
#include "kev/formats/torch_checkpoint.h"
#include "kev/text/delimiters.h"

namespace kev {

// What every planner learns.
struct PlannedInputs {
  Recipe recipe;
  VerifiedInputs inputs;
  BaseIndex index;                                       // the shards' index (names sorted)
  std::vector<std::unique_ptr<SafetensorsFile>> shards;  // index.shards order
  Delimiters delimiters;
  HeadWeights head;
  CheckpointFields fields;
  int64_t hidden = 0, layers = 0;
};

class WeightsSource {
 public:
  WeightsSource() = default;  // a source plans into in_ in its constructor
  virtual ~WeightsSource() = default;
  WeightsSource(const WeightsSource&) = delete;
  WeightsSource& operator=(const WeightsSource&) = delete;
  const PlannedInputs& inputs() const { return in_; }

  // Streams shard s (index order) into out_path, advancing progress by its bytes and tensors;
  // returns the SHA-256 of what was written.
  virtual std::string write_shard(size_t s, const std::string& out_path, Progress& progress) = 0;
  // Called once every shard is written: refuses (kInternal) a plan that was not carried out.
  virtual void check_shards_written() const {}
  // The bundle's files besides the shards, head.safetensors and the manifest: name -> bytes.
  virtual std::vector<std::pair<std::string, std::string>> small_files() const = 0;
  // The manifest fields of this form: "weights", "weights_sha256", "dtypes" and its own.
  virtual nlohmann::json manifest_fields() const = 0;
  // For the summary: the ISA that merged ("none": nothing is merged) and the targets merged.
  virtual std::string merge_isa_name() const = 0;
  virtual size_t merged_targets() const { return 0; }

 protected:
  PlannedInputs in_;
};

// The planners (steps (2)-(3)), given a recipe already checked to be fully pinned and an output
// path that does not exist.
std::unique_ptr<WeightsSource> plan_lora_source(const ExportOptions& o, Recipe recipe);
std::unique_ptr<WeightsSource> plan_full_source(const ExportOptions& o, Recipe recipe);

// Reads head.pt from its verified bytes, its inference fields into p.fields, and refuses
// (refuse_form_mismatch) a checkpoint whose head.pt names another form than `form` ("lora",
// "full"), the form its files hold. Returns head.pt's value (the head's tensors are read from
// it once the config is known).
PyValue read_head_fields(PlannedInputs& p, const std::string& checkpoint_dir, const char* form);

// Opens each shard the index names from `dir` (`role`: "base" or "checkpoint", the recipe's
// side that must pin it), after the inputs were hashed, and checks that the shards hold exactly
// the tensors the index assigns them. Returns every tensor by name.
std::map<std::string, const TensorInfo*> open_indexed_shards(PlannedInputs& p,
                                                             const std::string& dir,
                                                             const std::string& role,
                                                             const std::string& recipe_path);

}  // namespace kev
