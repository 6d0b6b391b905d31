// Recipes: the pinned inputs of an export (recipes/<model>.json, schema in DESIGN.md).
//
// parse_recipe validates the structure strictly (format tag, revisions that are null or 40 hex,
// plain file names, hashes that are null or 64 lowercase hex, positive LoRA numbers) and throws
// Error(kBadInput) naming the recipe and field. A null hash or revision is legal in a recipe
// (the shipped ones have them) but require_fully_pinned refuses it, pointing to `kev pin`.
// The format tag "kev-4b-merged/1" names the schema, which every member of the family shares.
// "weights": "full" (absent = "lora") marks a full-weight checkpoint: the checkpoint pins its
// own config, tokenizer, index and shards plus head.pt; "base" names what it was fine-tuned
// from (repo and revision, identity only, no files) and there is no "lora" section.
#pragma once
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>

namespace kev {

inline constexpr const char* kRecipeFormat = "kev-4b-merged/1";

struct PinnedRepo {
  std::string repo;
  std::string revision;  // 40 hex; empty = null (not known: kev pin fills it)
  // file name -> SHA-256 (lowercase hex) or nullopt when the recipe leaves it unpinned.
  std::map<std::string, std::optional<std::string>> files;
};

struct Recipe {
  std::string format = kRecipeFormat;
  std::string model;
  std::string weights = "lora";  // "lora" or "full"
  PinnedRepo base, checkpoint;
  std::string reference_repo, reference_revision;
  int64_t rank = 0;
  double alpha = 0;
  int64_t targets = 0;
};

// The files a recipe must list (shards come from the base index and are checked later).
inline constexpr const char* kRequiredBaseFiles[] = {
    "config.json", "tokenizer.json", "tokenizer_config.json", "model.safetensors.index.json"};
inline constexpr const char* kRequiredCheckpointFiles[] = {"adapter_config.json",
                                                           "adapter_model.safetensors", "head.pt"};

// A full-weight checkpoint's files besides the shards its index names.
inline constexpr const char* kRequiredFullCheckpointFiles[] = {
    "config.json", "tokenizer.json", "tokenizer_config.json", "model.safetensors.index.json",
    "head.pt"};

Recipe parse_recipe(std::string_view json, const std::string& name_for_errors);
Recipe load_recipe(const std::string& path);
std::string recipe_to_json(const Recipe& recipe);  // pretty-printed, trailing newline

// Throws Error(kBadInput) naming the first unpinned file and telling the user to run kev pin.
void require_fully_pinned(const Recipe& recipe, const std::string& recipe_path);

// True for a bare file name we are willing to join to a directory ("a.json", not "../a").
bool is_plain_file_name(std::string_view name);

}  // namespace kev
