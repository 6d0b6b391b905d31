#include "kev/core/file.h"

#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <random>

#include "kev/core/error.h"
#include "kev/core/test_hooks.h"

namespace kev {
namespace {

std::string errno_text() {
  return std::strerror(errno);
}

std::string parent_of(const std::string& path) {
  auto p = std::filesystem::path(path).lexically_normal();
  auto parent = p.parent_path();
  return parent.empty() ? "." : parent.string();
}

void fsync_path(const std::string& path, bool directory) {
  int fd = ::open(path.c_str(), (directory ? O_DIRECTORY : 0) | O_RDONLY | O_CLOEXEC);
  if (fd < 0) fail(ErrorKind::kIo, "cannot open {} to sync it: {}", path, errno_text());
  int rc = ::fsync(fd);
  int saved = errno;
  ::close(fd);
  if (rc != 0) fail(ErrorKind::kIo, "cannot sync {}: {}", path, std::strerror(saved));
}

std::atomic<uint64_t> g_write_budget{UINT64_MAX};
std::atomic<uint64_t> g_bytes_written{0};

}  // namespace

MappedFile::MappedFile(const std::string& path) : path_(path) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) fail(ErrorKind::kIo, "cannot open {}: {}", path, errno_text());
  struct stat st {};
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    ::close(fd);
    fail(ErrorKind::kIo, "{} is not a readable regular file", path);
  }
  size_ = static_cast<size_t>(st.st_size);
  if (size_ > 0) {
    void* p = ::mmap(nullptr, size_, PROT_READ, MAP_PRIVATE, fd, 0);
    if (p == MAP_FAILED) {
      ::close(fd);
      fail(ErrorKind::kIo, "cannot map {}: {}", path, errno_text());
    }
    data_ = static_cast<const uint8_t*>(p);
  }
  ::close(fd);
}

MappedFile::~MappedFile() {
  if (data_) ::munmap(const_cast<uint8_t*>(data_), size_);
}

MappedFile::MappedFile(MappedFile&& other) noexcept
    : path_(std::move(other.path_)), data_(other.data_), size_(other.size_) {
  other.data_ = nullptr;
  other.size_ = 0;
}

void MappedFile::release_pages(size_t offset, size_t length) const {
  if (!data_ || length == 0) return;
  static const size_t kPage = static_cast<size_t>(::sysconf(_SC_PAGESIZE));
  size_t begin = (offset + kPage - 1) / kPage * kPage;
  size_t end = std::min(size_, offset + length) / kPage * kPage;
  if (end > begin) ::madvise(const_cast<uint8_t*>(data_) + begin, end - begin, MADV_DONTNEED);
}

std::string read_file(const std::string& path) {
  MappedFile f(path);
  return std::string(f.view());
}

bool path_exists(const std::string& path) {
  struct stat st {};
  return ::lstat(path.c_str(), &st) == 0;
}

bool is_directory(const std::string& path) {
  struct stat st {};
  return ::stat(path.c_str(), &st) == 0 && S_ISDIR(st.st_mode);
}

void WriteFaults::configure_from_env() {
  if (const std::optional<uint64_t> budget = test_hooks::write_fault_budget())
    fail_after_bytes(*budget);
}

void WriteFaults::fail_after_bytes(uint64_t n) {
  g_bytes_written = 0;
  g_write_budget = n;
}

void WriteFaults::check(size_t about_to_write) {
  uint64_t total = g_bytes_written.fetch_add(about_to_write) + about_to_write;
  if (total > g_write_budget)
    fail(ErrorKind::kIo, "write failed: No space left on device (injected fault after {} bytes)",
         g_write_budget.load());
}

OutputFile::OutputFile(const std::string& path) : path_(path) {
  fd_ = ::open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
  if (fd_ < 0) fail(ErrorKind::kIo, "cannot create {}: {}", path, errno_text());
}

OutputFile::~OutputFile() {
  if (fd_ >= 0) ::close(fd_);
}

void OutputFile::write(const void* data, size_t size) {
  if (fd_ < 0) fail(ErrorKind::kInternal, "write to closed file {}", path_);
  WriteFaults::check(size);
  const char* p = static_cast<const char*>(data);
  while (size > 0) {
    ssize_t n = ::write(fd_, p, std::min<size_t>(size, size_t{1} << 30));
    if (n < 0) {
      if (errno == EINTR) continue;
      fail(ErrorKind::kIo, "cannot write {}: {}", path_, errno_text());
    }
    p += n;
    size -= static_cast<size_t>(n);
    written_ += static_cast<uint64_t>(n);
  }
}

void OutputFile::close_synced() {
  if (fd_ < 0) return;
  int rc = ::fsync(fd_);
  int saved = errno;
  int rc2 = ::close(fd_);
  fd_ = -1;
  if (rc != 0 || rc2 != 0)
    fail(ErrorKind::kIo, "cannot sync {}: {}", path_, std::strerror(rc != 0 ? saved : errno));
}

void OutputFile::close() {
  if (fd_ < 0) return;
  const int rc = ::close(fd_);
  fd_ = -1;
  if (rc != 0) fail(ErrorKind::kIo, "cannot close {}: {}", path_, errno_text());
}

void write_file_synced(const std::string& path, std::string_view bytes) {
  OutputFile f(path);
  f.write(bytes);
  f.close_synced();
}

void remove_tree(const std::string& path) noexcept {
  std::error_code ec;
  std::filesystem::remove_all(path, ec);
}

namespace {

constexpr const char* kStagingTag = ".kev-staging.";

// Removes "<parent>/.<name>.kev-staging.<pid>.<r>" directories whose pid no longer runs.
void sweep_stale_staging(const std::string& parent, const std::string& name) {
  std::string prefix = "." + name + kStagingTag;
  DIR* d = ::opendir(parent.c_str());
  if (!d) return;
  while (dirent* e = ::readdir(d)) {
    std::string entry = e->d_name;
    if (entry.rfind(prefix, 0) != 0) continue;
    long pid = std::strtol(entry.c_str() + prefix.size(), nullptr, 10);
    if (pid > 0 && (::kill(static_cast<pid_t>(pid), 0) == 0 || errno == EPERM)) continue;
    remove_tree(parent + "/" + entry);
  }
  ::closedir(d);
}

}  // namespace

StagingDir::StagingDir(const std::string& destination) : destination_(destination) {
  auto dest = std::filesystem::path(destination).lexically_normal();
  std::string name = dest.filename().string();
  if (name.empty() || name == "." || name == "..")
    fail(ErrorKind::kBadInput, "output path {} must name a new directory", destination);
  std::string parent = parent_of(destination);
  if (!is_directory(parent))
    fail(ErrorKind::kIo, "the parent directory of {} does not exist", destination);
  if (path_exists(destination))
    fail(ErrorKind::kBadInput, "{} already exists; choose a new output path or remove it first",
         destination);
  sweep_stale_staging(parent, name);
  std::random_device rd;
  path_ = fmt::format("{}/.{}{}{}.{:08x}", parent, name, kStagingTag, ::getpid(), rd());
  if (::mkdir(path_.c_str(), 0755) != 0)
    fail(ErrorKind::kIo, "cannot create staging directory {}: {}", path_, errno_text());
}

StagingDir::~StagingDir() {
  if (!published_) remove_tree(path_);
}

void StagingDir::publish() {
  // Every directory's entries must be durable before the rename makes them visible.
  std::error_code ec;
  for (auto it = std::filesystem::recursive_directory_iterator(path_, ec);
       !ec && it != std::filesystem::recursive_directory_iterator(); it.increment(ec))
    if (it->is_directory(ec)) fsync_path(it->path().string(), true);
  if (ec) fail(ErrorKind::kIo, "cannot list staging directory {}: {}", path_, ec.message());
  fsync_path(path_, true);
  // RENAME_NOREPLACE: never replace a destination that appeared meanwhile (plain rename()
  // would silently replace an empty directory). Older kernels/filesystems without it get a
  // check-then-rename.
  if (::renameat2(AT_FDCWD, path_.c_str(), AT_FDCWD, destination_.c_str(), RENAME_NOREPLACE) != 0) {
    if (errno == EEXIST)
      fail(ErrorKind::kBadInput, "{} appeared while writing it; nothing was published",
           destination_);
    if (errno != EINVAL && errno != ENOSYS)
      fail(ErrorKind::kIo, "cannot publish {}: {}", destination_, errno_text());
    if (path_exists(destination_))
      fail(ErrorKind::kBadInput, "{} appeared while writing it; nothing was published",
           destination_);
    if (::rename(path_.c_str(), destination_.c_str()) != 0)
      fail(ErrorKind::kIo, "cannot publish {}: {}", destination_, errno_text());
  }
  published_ = true;
  fsync_path(parent_of(destination_), true);
}

}  // namespace kev
