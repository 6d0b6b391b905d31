#include "kev/export/inputs.h"

#include <sys/stat.h>

#include <algorithm>
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
    bool is_tensor_file = it.path.size() > 12 && it.path.ends_with(".safetensors");
    if (!is_tensor_file) {
      if (it.size > kSmallFileLimit)
        fail(ErrorKind::kBadInput, "{} is {} bytes, too large for a configuration file", it.key,
             it.size);
      std::string bytes = read_file(it.path);
      actual[i] = sha256_hex(bytes);
      std::lock_guard lock(mutex);
      out.contents[it.key] = std::move(bytes);
    } else {
      actual[i] = sha256_file(it.path);
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
