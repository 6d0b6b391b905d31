// Verify before parse: every file a recipe pins is hashed before anything reads its contents.
//
// verify_pinned_inputs refuses (creating nothing) when the recipe leaves a file unpinned
// (kBadInput, pointing to `kev pin`), when a pinned file is missing (kIo) or when its SHA-256
// differs from the pin (kIntegrity, naming the file and both digests).
//
// Which bytes are used:
// - Every file except the base shards (JSON, head.pt, adapter_model.safetensors; each at most
//   kSmallFileLimit bytes) is read into memory once and hashed from those bytes; the exporter
//   parses exactly those bytes, so no later change on disk can reach the bundle.
// - Base shards (GBs; a full-weight checkpoint's own shards likewise) are hashed through a mapping
//   and re-mapped by the exporter. Their
//   FileIdentity is taken before and after hashing (a change while hashing is refused) and kept;
//   check_unchanged() compares it again (the exporter calls it once the shards are mapped and
//   again right before publishing) and refuses with kIntegrity naming the file.
//   What this cannot see: a shard swapped for another file after hashing and swapped back
//   between the exporter's open() and its first re-check (microseconds); an in-place write
//   that lands within the same timestamp tick as the post-hash stat and keeps the size
//   (mtime/ctime granularity is the kernel's clock tick, ~1-10 ms); and writes that bypass the
//   inode's timestamps (a raw block device, some network/FUSE filesystems). Closing these needs
//   hashing the very pages that are merged, which would cost a second pass over the shards.
#pragma once
#include <cstdint>
#include <map>
#include <string>

#include "kev/export/recipe.h"

namespace kev {

// What stat() says about a file: a replacement changes dev/ino, a write or truncate changes
// size/mtime/ctime (ctime cannot be set back by utimensat, so it also catches a restored mtime).
struct FileIdentity {
  uint64_t dev = 0, ino = 0, size = 0;
  int64_t mtime_s = 0, mtime_ns = 0, ctime_s = 0, ctime_ns = 0;
  bool operator==(const FileIdentity&) const = default;
};
FileIdentity file_identity(const std::string& path);  // throws kIo naming the path

struct VerifiedInputs {
  std::string base_dir, checkpoint_dir;
  std::map<std::string, std::string> digests;      // "base/<file>" / "checkpoint/<file>" -> sha256
  std::map<std::string, std::string> contents;     // same keys, files other than base shards
  std::map<std::string, FileIdentity> identities;  // base shards, as of their hashing
  uint64_t total_bytes = 0;

  // Refuses (kIntegrity, naming the file) when a base shard's identity differs from the one
  // recorded when it was hashed.
  void check_unchanged() const;

  // The verified bytes of a small file; throws kInternal if it was not kept.
  const std::string& bytes(const std::string& key) const;
  std::string path(const std::string& key) const;  // "base/x" -> "<base_dir>/x"
};

inline constexpr uint64_t kSmallFileLimit = uint64_t{256} << 20;

VerifiedInputs verify_pinned_inputs(const Recipe& recipe, const std::string& recipe_path,
                                    const std::string& base_dir, const std::string& checkpoint_dir);

}  // namespace kev
