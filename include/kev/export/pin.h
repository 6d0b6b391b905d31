// `kev pin`: write a fully pinned recipe from a trusted local download.
//
// A full-weight member (kev-27b, Kev 1.0) takes no base: the checkpoint's config.json,
// tokenizer files, index, every shard the index names and head.pt are hashed, and every check
// `kev export` makes (export/full_weights.h) runs before the recipe is written. Upstream's form
// rule applies to every member: adapter files make a LoRA checkpoint, config + shards without
// them a full one; head.pt's "weights" must agree and the member's form must be that one.
//
// Hashes the base files (config, tokenizer, tokenizer_config, index and every shard the index
// names) and the checkpoint files (adapter_config, adapter_model, head.pt). When a directory is
// a Hugging Face cache snapshot (.../models--ORG--NAME/snapshots/<revision>/ with files that are
// symlinks to ../../blobs/<id>), the repo and revision are taken from the path and each file is
// cross-checked against its blob name: LFS blobs are named by their SHA-256, small files by
// their git blob SHA-1. A mismatch is refused (Error kIntegrity) and nothing is written. The
// recipe file is written atomically and an existing one is never overwritten.
//
// Before hashing, head.pt's inference fields are read and anything kev does not implement is
// refused (Error kUnsupported, formats/checkpoint_fields.h), as are adapter_config.json settings
// (export/configs.h); a recipe is only written for a checkpoint `kev export` can run.
//
// A revision the built-in recipe leaves null (not confirmed) comes from the snapshot path or
// --base-revision / --checkpoint-revision; without either, pin refuses. Before writing, the
// pinned config.json and adapter_config.json must define the member's LoRA inventory
// (check_member_counts): pinning a Kev-0.8B download as kev-4b is refused with a hint.
#pragma once
#include <cstddef>
#include <string>
#include <vector>

#include "kev/export/recipe.h"

namespace kev {

struct PinOptions {
  std::string base_dir, checkpoint_dir, out_path, model = "kev-4b";  // base_dir: LoRA only
  // A revision the user vouches for (40 hex); needed where the recipe's is null and the
  // directory is not a Hugging Face cache snapshot. Empty: not given.
  std::string base_revision, checkpoint_revision;
};

struct PinSummary {
  Recipe recipe;
  size_t files = 0, cross_checked = 0;
  std::vector<std::string> notes;  // e.g. a snapshot revision differing from the release
};

// The built-in description of a family member (kev/export/family.h: repos, release revisions
// where confirmed, LoRA numbers, the target count derived from its base config) with null
// hashes; throws kUnsupported for unknown names.
Recipe known_recipe(const std::string& model);

PinSummary run_pin(const PinOptions& options);

// The id Hugging Face's cache names a blob by: SHA-256 for LFS files, git blob SHA-1 otherwise.
std::string git_blob_sha1(std::string_view bytes);

}  // namespace kev
