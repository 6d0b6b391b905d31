// What `kev pin` reads and writes on disk (pin_files.h): Hugging Face cache snapshots, hashing
// with the cache's own names as a cross-check, and the recipe's publication.
#include "export/pin_files.h"

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
#include "kev/export/pin.h"

namespace kev {
namespace {

namespace fs = std::filesystem;

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
    // The cache names a large file's blob by its SHA-256, a small one's by its git blob SHA-1.
    const bool by_sha256 = is_hex_of_length(blob, 64);
    if (!ec && target.parent_path().filename() == "blobs" &&
        (by_sha256 || is_hex_of_length(blob, 40))) {
      const std::string actual = by_sha256 ? digest : git_blob_sha1(read_file(path));
      if (blob != actual)
        fail(ErrorKind::kIntegrity,
             "{} ({}) has {} {} but its Hugging Face cache blob is named {}; the download is "
             "corrupt, fetch it again",
             key, path, by_sha256 ? "SHA-256" : "git blob SHA-1", actual, blob);
      ++cross_checked;
    }
  }
  return digest;
}

// Writes the recipe to out_path, which must not exist (the temporary beside it is removed on any
// failure; an existing file is never replaced).
void publish_recipe(const Recipe& r, const std::string& out_path) {
  const std::string tmp = fmt::format("{}.kev-pin.{}", out_path, ::getpid());
  TempFile guard{tmp};
  write_file_synced(tmp, recipe_to_json(r));
  publish_no_replace(tmp, out_path);
  guard.keep = true;
}

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

}  // namespace kev
