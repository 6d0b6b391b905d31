// What `kev pin` reads and writes on disk, apart from the checks it shares with `kev export`.
// Private to the export layer.
#pragma once
#include <cstddef>
#include <string>

#include "kev/export/recipe.h"

namespace kev {

// A directory inside a Hugging Face cache snapshot (.../models--ORG--NAME/snapshots/REVISION):
// its repository and revision; is_snapshot false for any other directory.
struct Snapshot {
  bool is_snapshot = false;
  std::string repo, revision;
};
Snapshot detect_snapshot(const std::string& dir);

// s is n lowercase hexadecimal digits.
bool is_hex_of_length(const std::string& s, size_t n);

// The SHA-256 of dir/name (`key` names it in errors: kIo when missing or not a regular file).
// When the file is a link into the cache's blobs/, the blob's name must be that SHA-256 (a large
// file) or the git blob SHA-1 (a small one), else kIntegrity; cross_checked counts those checks.
std::string hash_and_cross_check(const std::string& dir, const std::string& name,
                                 const std::string& key, size_t& cross_checked);

// Writes the recipe to out_path, which must not exist (kBadInput if it does: a recipe is never
// replaced; kIo on a failed write). The temporary beside it is removed on any failure.
void publish_recipe(const Recipe& r, const std::string& out_path);

}  // namespace kev
