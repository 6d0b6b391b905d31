// Files: read-only mappings, whole-file reads, and crash-safe publication.
//
// MappedFile   read-only mmap of a whole file (empty files allowed); throws Error(kIo).
// OutputFile   a file being written, through a WriteFaults seam so tests can make the write
//              past N bytes fail like a full disk would.
// StagingDir   a private directory beside a destination; publish() fsyncs every directory in
//              it and renames it into place atomically, never replacing anything; if never
//              published, the destructor removes it. Stale staging dirs of dead processes are
//              swept by the next run for the same destination.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace kev {

class MappedFile {
 public:
  explicit MappedFile(const std::string& path);
  ~MappedFile();
  MappedFile(MappedFile&& other) noexcept;
  MappedFile& operator=(MappedFile&&) = delete;
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;

  const uint8_t* data() const { return data_; }
  size_t size() const { return size_; }
  std::string_view view() const { return {reinterpret_cast<const char*>(data_), size_}; }
  const std::string& path() const { return path_; }
  // Tells the kernel we are done with a range (streaming reads keep RSS flat).
  void release_pages(size_t offset, size_t length) const;

 private:
  std::string path_;
  const uint8_t* data_ = nullptr;
  size_t size_ = 0;
};

std::string read_file(const std::string& path);  // throws Error(kIo) naming the path
bool path_exists(const std::string& path);
bool is_directory(const std::string& path);

// Fault injection for writes. Process-wide so the real binary can be driven by tests through
// the environment: in a build with test hooks (kev/core/test_hooks.h),
// KEV_FAULT_WRITE_AFTER_BYTES=N makes the write that would take the total number of bytes
// written by this process past N fail with ENOSPC.
struct WriteFaults {
  static void configure_from_env();
  static void fail_after_bytes(uint64_t n);
  static void check(size_t about_to_write);  // throws Error(kIo) when the budget is exhausted
};

class OutputFile {
 public:
  explicit OutputFile(const std::string& path);  // creates (O_EXCL); throws Error(kIo)
  ~OutputFile();                                 // closes without fsync if still open
  OutputFile(const OutputFile&) = delete;
  OutputFile& operator=(const OutputFile&) = delete;
  void write(const void* data, size_t size);  // all or throw Error(kIo)
  void write(std::string_view s) { write(s.data(), s.size()); }
  void close_synced();  // fsync + close; throws Error(kIo)
  void close();         // close without fsync; throws Error(kIo)
  uint64_t bytes_written() const { return written_; }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
  int fd_ = -1;
  uint64_t written_ = 0;
};

// Writes a small file completely and fsyncs it.
void write_file_synced(const std::string& path, std::string_view bytes);

class StagingDir {
 public:
  // Refuses (Error kBadInput) if `destination` exists. Creates
  // "<parent>/.<name>.kev-staging.<pid>.<random>" and sweeps stale ones whose pid is dead.
  explicit StagingDir(const std::string& destination);
  ~StagingDir();  // removes the staging dir unless published
  StagingDir(const StagingDir&) = delete;
  StagingDir& operator=(const StagingDir&) = delete;

  const std::string& path() const { return path_; }
  std::string file(const std::string& name) const { return path_ + "/" + name; }
  // fsyncs the directory, renames it to destination (refusing to replace anything), fsyncs
  // the parent. After this the destructor leaves it alone.
  void publish();

 private:
  std::string destination_;
  std::string path_;
  bool published_ = false;
};

void remove_tree(const std::string& path) noexcept;

}  // namespace kev
