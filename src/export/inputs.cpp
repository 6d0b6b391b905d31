#include "kev/export/inputs.h"

#include <sys/stat.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <mutex>
#include <vector>

#include "kev/core/error.h"
#include "kev/core/file.h"
#include "kev/core/interrupt.h"
#include "kev/core/progress.h"
#include "kev/core/sha256.h"
#include "kev/core/threads.h"

namespace kev {

const std::string& VerifiedInputs::bytes(const std::string& key) const {
  auto it = contents.find(key);
  if (it == contents.end()) fail(ErrorKind::kInternal, "{} was not kept in memory", key);
  return it->second;
}

std::string VerifiedInputs::path(const std::string& key) const {
  if (key.rfind("base/", 0) == 0) return base_dir + "/" + key.substr(5);
  if (key.rfind("checkpoint/", 0) == 0) return checkpoint_dir + "/" + key.substr(11);
  fail(ErrorKind::kInternal, "bad input key {}", key);
}

namespace {

FileIdentity identity_of(const struct stat& st) {
  return {static_cast<uint64_t>(st.st_dev),
          static_cast<uint64_t>(st.st_ino),
          static_cast<uint64_t>(st.st_size),
          st.st_mtim.tv_sec,
          st.st_mtim.tv_nsec,
          st.st_ctim.tv_sec,
          st.st_ctim.tv_nsec};
}

}  // namespace

FileIdentity file_identity(const std::string& path) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0)
    fail(ErrorKind::kIo, "cannot stat {}: {}", path, std::strerror(errno));
  return identity_of(st);
}

void VerifiedInputs::check_unchanged() const {
  for (const auto& [key, id] : identities) {
    std::string p = path(key);
    struct stat st {};
    if (::stat(p.c_str(), &st) != 0 || identity_of(st) != id)
      fail(ErrorKind::kIntegrity,
           "{} ({}) was replaced or modified after it was verified; refusing to export "
           "bytes that may not match its pinned SHA-256",
           key, p);
  }
}

VerifiedInputs verify_pinned_inputs(const Recipe& recipe, const std::string& recipe_path,
                                    const std::string& base_dir,
                                    const std::string& checkpoint_dir) {
  require_fully_pinned(recipe, recipe_path);
  struct Item {
    std::string key, path, expected;
    uint64_t size = 0;
  };
  std::vector<Item> items;
  VerifiedInputs out;
  out.base_dir = base_dir;
  out.checkpoint_dir = checkpoint_dir;
  for (const auto* repo : {&recipe.base, &recipe.checkpoint}) {
    bool is_base = repo == &recipe.base;
    const std::string& dir = is_base ? base_dir : checkpoint_dir;
    for (const auto& [name, hash] : repo->files) {
      Item it{std::string(is_base ? "base/" : "checkpoint/") + name, dir + "/" + name, *hash};
      struct stat st {};
      if (::stat(it.path.c_str(), &st) != 0 || !S_ISREG(st.st_mode))
        fail(ErrorKind::kIo,
             "pinned input {} is missing ({} is not a readable file; the recipe pins SHA-256 {})",
             it.key, it.path, it.expected);
      it.size = static_cast<uint64_t>(st.st_size);
      out.total_bytes += it.size;
      items.push_back(std::move(it));
    }
  }
  // Largest first so the two cores finish together.
  std::sort(items.begin(), items.end(),
            [](const Item& a, const Item& b) { return a.size > b.size; });
  std::vector<std::string> actual(items.size());
  std::mutex mutex;
  Progress progress("verifying inputs", out.total_bytes, items.size());
  parallel_for(items.size(), [&](size_t i) {
    check_interrupted();
    const Item& it = items[i];
    // Weight shards (the base's, or a full-weight checkpoint's own) are too large to hold.
    bool is_shard = it.key.ends_with(".safetensors") &&
                    (it.key.starts_with("base/") || recipe.weights == "full");
    if (!is_shard) {
      if (it.size > kSmallFileLimit)
        fail(ErrorKind::kBadInput,
             "{} is {} bytes, more than the {} this exporter reads into memory", it.key, it.size,
             kSmallFileLimit);
      std::string bytes = read_file(it.path);
      actual[i] = sha256_hex(bytes);
      std::lock_guard lock(mutex);
      out.contents[it.key] = std::move(bytes);
    } else {
      FileIdentity before = file_identity(it.path);
      actual[i] = sha256_file(it.path);
      if (file_identity(it.path) != before)
        fail(ErrorKind::kIntegrity, "{} ({}) changed while it was being hashed", it.key, it.path);
      std::lock_guard lock(mutex);
      out.identities[it.key] = before;
    }
    progress.advance(it.size, 1);
  });
  for (size_t i = 0; i < items.size(); ++i) {
    if (actual[i] != items[i].expected)
      fail(ErrorKind::kIntegrity,
           "{} ({}) has SHA-256 {} but recipe {} pins {}; refusing to read it", items[i].key,
           items[i].path, actual[i], recipe_path, items[i].expected);
    out.digests[items[i].key] = actual[i];
  }
  return out;
}

}  // namespace kev
