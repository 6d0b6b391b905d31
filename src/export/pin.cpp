#include "kev/export/pin.h"

#include <fcntl.h>
#include <openssl/evp.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>

#include <filesystem>
#include <regex>

#include "kev/core/error.h"
#include "kev/core/file.h"
#include "kev/core/sha256.h"
#include "kev/export/configs.h"

namespace kev {
namespace {

namespace fs = std::filesystem;

struct Snapshot {
  bool is_snapshot = false;
  std::string repo, revision;
};

Snapshot detect_snapshot(const std::string& dir) {
  std::error_code ec;
  fs::path p = fs::weakly_canonical(fs::absolute(dir), ec);
  if (ec) return {};
  static const std::regex kRev("[0-9a-f]{40}");
  std::string rev = p.filename().string();
  fs::path snapshots = p.parent_path();
  std::string repo_dir = snapshots.parent_path().filename().string();
  if (!std::regex_match(rev, kRev) || snapshots.filename() != "snapshots" ||
      repo_dir.rfind("models--", 0) != 0)
    return {};
  std::string rest = repo_dir.substr(8);
  auto sep = rest.find("--");
  if (sep == std::string::npos) return {};
  return {true, rest.substr(0, sep) + "/" + rest.substr(sep + 2), rev};
}

bool is_hex_of_length(const std::string& s, size_t n) {
  if (s.size() != n) return false;
  for (char c : s)
    if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'))) return false;
  return true;
}

// Hashes dir/name; cross-checks a cache blob name when the file is a symlink into blobs/.
std::string hash_and_cross_check(const std::string& dir, const std::string& name,
                                 const std::string& key, size_t& cross_checked) {
  std::string path = dir + "/" + name;
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0 || !S_ISREG(st.st_mode))
    fail(ErrorKind::kIo, "{} ({}) is missing or not a regular file", key, path);
  std::string digest = sha256_file(path);
  std::error_code ec;
  if (fs::is_symlink(path, ec)) {
    fs::path target = fs::read_symlink(path, ec);
    std::string blob = target.filename().string();
    if (!ec && target.parent_path().filename() == "blobs") {
      if (is_hex_of_length(blob, 64)) {
        if (blob != digest)
          fail(ErrorKind::kIntegrity,
               "{} ({}) has SHA-256 {} but its Hugging Face cache blob is "
               "named {}; the download is corrupt, fetch it again",
               key, path, digest, blob);
        ++cross_checked;
      } else if (is_hex_of_length(blob, 40)) {
        std::string sha1 = git_blob_sha1(read_file(path));
        if (blob != sha1)
          fail(ErrorKind::kIntegrity,
               "{} ({}) has git blob SHA-1 {} but its Hugging Face cache "
               "blob is named {}; the download is corrupt, fetch it again",
               key, path, sha1, blob);
        ++cross_checked;
      }
    }
  }
  return digest;
}

// Removes a temporary file on every way out (a failed write or fsync included) unless kept.
struct TempFile {
  std::string path;
  bool keep = false;
  ~TempFile() {
    if (!keep) ::unlink(path.c_str());
  }
};

// Renames tmp to out, never replacing an existing out. RENAME_NOREPLACE makes the check and
// the rename one step; filesystems without it (EINVAL) or old kernels (ENOSYS) fall back to a
// check followed by rename, which leaves a small race.
void publish_no_replace(const std::string& tmp, const std::string& out) {
  if (::renameat2(AT_FDCWD, tmp.c_str(), AT_FDCWD, out.c_str(), RENAME_NOREPLACE) == 0) return;
  int err = errno;
  if (err == EINVAL || err == ENOSYS) {
    if (path_exists(out))
      err = EEXIST;
    else if (::rename(tmp.c_str(), out.c_str()) == 0)
      return;
    else
      err = errno;
  }
  if (err == EEXIST)
    fail(ErrorKind::kBadInput, "{} already exists; kev pin never overwrites a recipe", out);
  fail(ErrorKind::kIo, "cannot create {}: {}", out, std::strerror(err));
}

}  // namespace

std::string git_blob_sha1(std::string_view bytes) {
  std::string header = "blob " + std::to_string(bytes.size());
  header.push_back('\0');
  unsigned char md[EVP_MAX_MD_SIZE];
  unsigned int len = 0;
  EVP_MD_CTX* ctx = EVP_MD_CTX_new();
  if (!ctx || EVP_DigestInit_ex(ctx, EVP_sha1(), nullptr) != 1 ||
      EVP_DigestUpdate(ctx, header.data(), header.size()) != 1 ||
      EVP_DigestUpdate(ctx, bytes.data(), bytes.size()) != 1 ||
      EVP_DigestFinal_ex(ctx, md, &len) != 1) {
    EVP_MD_CTX_free(ctx);
    fail(ErrorKind::kInternal, "SHA-1 failed");
  }
  EVP_MD_CTX_free(ctx);
  static const char* kHex = "0123456789abcdef";
  std::string out;
  for (unsigned i = 0; i < len; ++i) {
    out.push_back(kHex[md[i] >> 4]);
    out.push_back(kHex[md[i] & 15]);
  }
  return out;
}

Recipe known_recipe(const std::string& model) {
  if (model != "kev-4b")
    fail(ErrorKind::kUnsupported, "kev pin knows model \"kev-4b\"; \"{}\" has no built-in recipe",
         model);
  Recipe r;
  r.model = "kev-4b";
  r.base.repo = "Qwen/Qwen3.5-4B-Base";
  r.base.revision = "1001bb4d826a52d1f399e183466143f4da7b741b";
  r.checkpoint.repo = "jaredpalmer/kev-4b";
  r.checkpoint.revision = "139fdd94f1b6a6ad80cc15e08fcb99cac885a101";
  r.reference_repo = "jaredpalmer/kev";
  r.reference_revision = "2074cc44";
  r.rank = 16;
  r.alpha = 32;
  r.targets = 248;
  for (const char* f : kRequiredBaseFiles) r.base.files[f] = std::nullopt;
  for (const char* f : kRequiredCheckpointFiles) r.checkpoint.files[f] = std::nullopt;
  return r;
}

PinSummary run_pin(const PinOptions& o) {
  PinSummary s;
  s.recipe = known_recipe(o.model);
  if (path_exists(o.out_path))
    fail(ErrorKind::kBadInput, "{} already exists; kev pin never overwrites a recipe", o.out_path);
  Recipe& r = s.recipe;
  std::string index_bytes = read_file(o.base_dir + "/model.safetensors.index.json");
  BaseIndex index = parse_base_index(index_bytes, o.base_dir + "/model.safetensors.index.json");
  for (const auto& shard : index.shards) r.base.files[shard] = std::nullopt;
  for (auto* repo : {&r.base, &r.checkpoint}) {
    bool is_base = repo == &r.base;
    const std::string& dir = is_base ? o.base_dir : o.checkpoint_dir;
    Snapshot snap = detect_snapshot(dir);
    if (snap.is_snapshot) {
      if (snap.repo != repo->repo)
        s.notes.push_back(fmt::format("{} is a cache snapshot of {}, not {}; recording {}", dir,
                                      snap.repo, repo->repo, snap.repo));
      if (snap.revision != repo->revision)
        s.notes.push_back(fmt::format("{} is revision {} of {}, not the release revision {}", dir,
                                      snap.revision, snap.repo, repo->revision));
      repo->repo = snap.repo;
      repo->revision = snap.revision;
    }
    for (auto& [name, hash] : repo->files) {
      std::string key = std::string(is_base ? "base/" : "checkpoint/") + name;
      hash = hash_and_cross_check(dir, name, key, s.cross_checked);
      ++s.files;
    }
  }
  // The index we parsed must be the index we pinned.
  if (sha256_hex(index_bytes) != *r.base.files["model.safetensors.index.json"])
    fail(ErrorKind::kIntegrity, "{}/model.safetensors.index.json changed while pinning",
         o.base_dir);
  std::string tmp = fmt::format("{}.kev-pin.{}", o.out_path, ::getpid());
  TempFile guard{tmp};
  write_file_synced(tmp, recipe_to_json(r));
  publish_no_replace(tmp, o.out_path);
  guard.keep = true;
  return s;
}

}  // namespace kev
