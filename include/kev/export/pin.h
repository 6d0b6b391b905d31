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
// Which member: --model names it (PinOptions::model) and wins. Without it, pin tells the member
// from the checkpoint itself: its form by upstream's rule above, and the config.json of the
// backbone it runs on (a LoRA checkpoint's base, a full-weight checkpoint's own), which must be
// exactly one member's base config (member_from_config): 64 layers of Kev-27B's sizes in full
// weights are kev-27b, in a LoRA checkpoint's base kev-27b-v1-lora; a base of Qwen3.5-4B's sizes
// is kev-4b. That config.json is hashed (and cross-checked, in a cache snapshot) before it is
// parsed, and the hash pinned later must be the one the member was decided on (else kIntegrity).
// No member or several (as for kev synth's tiny shapes, tiny widths at a member's depth): Error
// kBadInput, one sentence naming the candidates and --model, before head.pt or any other input
// is read; so is a checkpoint with neither form's files, and an adapter without --base.
// PinSummary::member says which member was chosen and from what; with --model, a config that is
// exactly another member's gets a note (the recipe is still the named member's, checked as
// below).
//
// A revision the built-in recipe leaves null (not confirmed) comes from the snapshot path or
// --base-revision / --checkpoint-revision; without either, pin refuses. Before writing, the
// pinned config.json and adapter_config.json must define the member's LoRA inventory
// (check_member_counts): pinning a Kev-0.8B download as kev-4b is refused with a hint.
#pragma once
#include <cstddef>
#include <string>
#include <vector>

#include "kev/export/configs.h"
#include "kev/export/family.h"
#include "kev/export/recipe.h"

namespace kev {

struct PinOptions {
  std::string base_dir, checkpoint_dir, out_path;  // base_dir: LoRA only
  std::string model;  // a family member's name; empty: told from the checkpoint (see above)
  // A revision the user vouches for (40 hex); needed where the recipe's is null and the
  // directory is not a Hugging Face cache snapshot. Empty: not given.
  std::string base_revision, checkpoint_revision;
};

struct PinSummary {
  Recipe recipe;
  size_t files = 0, cross_checked = 0;
  std::vector<std::string> notes;  // e.g. a snapshot revision differing from the release
  // Where the member was told from the checkpoint (no --model): which, and from what, e.g.
  // "kev-27b (full weights, 64 layers, hidden size 5120) from the checkpoint's config.json".
  std::string member;
};

// The built-in description of a family member (kev/export/family.h: repos, release revisions
// where confirmed, LoRA numbers, the target count derived from its base config) with null
// hashes; throws kUnsupported for unknown names.
Recipe known_recipe(const std::string& model);

PinSummary run_pin(const PinOptions& options);

// The id Hugging Face's cache names a blob by: SHA-256 for LFS files, git blob SHA-1 otherwise.
std::string git_blob_sha1(std::string_view bytes);

}  // namespace kev
