// Verify before parse: every file a recipe pins is hashed before anything reads its contents.
//
// verify_pinned_inputs refuses (creating nothing) when the recipe leaves a file unpinned
// (kBadInput, pointing to `kev pin`), when a pinned file is missing (kIo) or when its SHA-256
// differs from the pin (kIntegrity, naming the file and both digests). Files other than
// *.safetensors (JSON, head.pt; at most kSmallFileLimit bytes) are read into memory once and
// hashed from those bytes, so what is later parsed is exactly what was verified. Safetensors
// files are hashed through a mapping (streamed, pages released) and re-mapped by the exporter.
#pragma once
#include <cstdint>
#include <map>
#include <string>

#include "kev/export/recipe.h"

namespace kev {

struct VerifiedInputs {
  std::string base_dir, checkpoint_dir;
  std::map<std::string, std::string> digests;   // "base/<file>" / "checkpoint/<file>" -> sha256
  std::map<std::string, std::string> contents;  // same keys, non-safetensors files only
  uint64_t total_bytes = 0;

  // The verified bytes of a small file; throws kInternal if it was not kept.
  const std::string& bytes(const std::string& key) const;
  std::string path(const std::string& key) const;  // "base/x" -> "<base_dir>/x"
};

inline constexpr uint64_t kSmallFileLimit = uint64_t{256} << 20;

VerifiedInputs verify_pinned_inputs(const Recipe& recipe, const std::string& recipe_path,
                                    const std::string& base_dir, const std::string& checkpoint_dir);

}  // namespace kev
