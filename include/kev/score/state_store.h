// StateStore: the saved points of the prefix cache (prefix_cache.h) on disk, in a directory that
// processes share (replicas on one volume, a process and the one that replaces it), so that a
// conversation's next turn after a restart, a crash or a rebalance continues from its last state
// instead of computing it again. File format and operations: docs/saved-states.md.
//
// Contract:
// - Keyed by content: a point's file lives under DIR/<identity>/ where identity is a digest of
//   the bundle (its manifest's SHA-256), the model's state identity (model.h: backend, layout,
//   precision, GDN form, bf16 dot kernel) and the file format version; its name is the token
//   count and the FNV-1a hash of the ids. Any process with the same bundle and identity finds it:
//   lookups read a listing of the directory made at most a second before (so a file another
//   process published within that second may be missed, and the state computed instead).
// - Exact or ignored: a file is read back only after its header (magic, version, byte order,
//   identity digest, token count, kind), its token ids (compared in full with the query's), its
//   size and its checksum (64-bit, over every byte) all match; the state read is then bit for bit
//   the state written. A file that fails any check is ignored (counted as rejected, logged, and
//   removed) and the state computed as if it were absent. The checksum catches damage (torn
//   writes, flipped bits, truncation), not a forger: the directory must be writable only by kev.
// - Writes happen on the store's own thread, never on the request path: save() only queues the
//   point (holding its state), up to a byte bound on the queue (beyond it a point is dropped and
//   counted; an empty queue takes any one point). A
//   file is written under a temporary name in the same directory and renamed into place, so a
//   reader never sees a partial file and concurrent writers of one point leave one whole file. A
//   write that fails (full disk, I/O error) is removed, counted and logged, and saving pauses for
//   kWriteBackoffSeconds: the process keeps serving from memory.
// - Bounded: after a write takes the directory (every identity in it) past max_bytes, as this
//   process counts it (at start, every minute, and its own writes in between), the least
//   recently used files (by modification time, which a read refreshes) are removed down to 90%
//   of it; temporary files older than an hour (of writers that died) are removed too.
// - flush(seconds) (a drain, or destruction) writes what is queued for at most `seconds`, then
//   abandons the rest (the file being written is removed within one 4 MiB chunk).
// Thread-safe: find_longest and save may be called from any thread at once.
#pragma once
#include <array>
#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "kev/model/model.h"
#include "kev/score/prefix_cache.h"

namespace kev {

inline constexpr uint32_t kStateFileVersion = 1;
inline constexpr double kWriteBackoffSeconds = 30;

struct StateStoreOptions {
  std::string dir;                                 // created if missing
  uint64_t max_bytes = uint64_t{16} << 30;         // the directory's bound (all identities)
  uint64_t max_pending_bytes = uint64_t{1} << 30;  // states queued for writing
  double drain_seconds = 10;                       // the destructor's flush bound
  std::function<void(const std::string&)> log;     // a line per event worth an operator's eye
};

struct StateStoreCounts {
  uint64_t hits = 0, misses = 0, rejected = 0;  // lookups; files refused by a check
  uint64_t writes = 0, write_errors = 0, dropped = 0, evictions = 0;
  uint64_t bytes_written = 0, bytes_read = 0;
  uint64_t disk_bytes = 0;  // the directory's files at the last count (every write, every scan)
  uint64_t pending = 0, pending_bytes = 0;
};

// A checksum of a byte stream in pieces: four 64-bit lanes of multiply-rotate rounds over 32-byte
// stripes, then the lanes, the remainder and the length mixed. Equal on every platform.
class StreamChecksum {
 public:
  void update(const void* bytes, size_t n);
  uint64_t digest() const;

 private:
  uint64_t lanes_[4] = {0x9E3779B97F4A7C15ull, 0xC2B2AE3D27D4EB4Full, 0x165667B19E3779F9ull,
                        0x27D4EB2F165667C5ull};
  unsigned char tail_[32] = {};
  size_t tail_len_ = 0;
  uint64_t total_ = 0;
};

// One file's header as written (docs/saved-states.md): what read_state_file checks.
struct StateFileKey {
  std::array<unsigned char, 32> identity{};  // SHA-256 of the identity text
  std::span<const int32_t> ids;              // the point's tokens
  PointKind kind = PointKind::kEnd;
};
// Writes a whole state file to `out` (the header, the ids, the model's state bytes, the checksum).
void write_state_file(const Model& model, const StateFileKey& key, const PrefixState& state,
                      const StateSink& out);
// Reads a state file of `file_bytes` bytes from `in`, checking everything against `key` (ids:
// the point's expected tokens); Error(kBadInput) naming the first check that fails, or
// Error(kIntegrity) when only the checksum does not match.
PrefixState read_state_file(const Model& model, const StateFileKey& key, uint64_t file_bytes,
                            StateSource& in, PointKind* kind = nullptr);

class StateStore {
 public:
  // `bundle_digest`: the bundle's identity (the manifest's SHA-256 hex). Error(kIo) when the
  // directory cannot be made; Error(kUnsupported) when the model's backend writes no states.
  StateStore(const Model& model, const std::string& bundle_digest, StateStoreOptions options);
  ~StateStore();  // flush(options.drain_seconds), then stops the writer
  StateStore(const StateStore&) = delete;
  StateStore& operator=(const StateStore&) = delete;

  struct Found {
    std::shared_ptr<const PrefixState> state;  // null: nothing usable on disk
    size_t length = 0;
    PointKind kind = PointKind::kEnd;
  };
  // The longest point on disk whose ids begin `ids`, longer than `longer_than` tokens and
  // accepted by `usable`. Counts a hit or a miss; each rejected file is counted and removed.
  Found find_longest(std::span<const int32_t> ids, size_t longer_than,
                     const std::function<bool(size_t)>& usable = {});
  // Queues the point for writing (nothing if its file exists, it is queued already, or saving
  // is paused after an error); `bytes` is what its state holds (for the queue's bound).
  void save(std::span<const int32_t> ids, std::shared_ptr<const PrefixState> state, PointKind kind,
            size_t bytes);
  // Writes what is queued for at most `seconds`; returns the points left unwritten (dropped).
  size_t flush(double seconds);

  StateStoreCounts counts() const;
  const std::string& directory() const { return dir_; }  // DIR/<identity>

 private:
  struct Job {
    std::vector<int32_t> ids;
    std::shared_ptr<const PrefixState> state;
    PointKind kind;
    size_t bytes;
  };
  std::string file_name(std::span<const int32_t> ids) const;
  // The points in the directory (token count, ids' hash), listed again when the last listing is
  // older than a second; this process's own writes are added as they are published.
  std::vector<std::pair<size_t, uint64_t>> listing();
  void listed(std::span<const int32_t> ids);
  void writer_loop();
  void write_one(const Job& job);
  void enforce_budget();
  void log(const std::string& line) const;

  const Model& model_;
  StateStoreOptions options_;
  std::array<unsigned char, 32> identity_{};
  std::string root_, dir_;
  mutable std::mutex mutex_;
  std::condition_variable wake_, idle_;
  std::deque<Job> queue_;
  std::vector<std::string> queued_names_;
  bool writing_ = false, stopping_ = false;
  std::atomic<bool> abandon_{false};
  double paused_until_ = 0;  // steady seconds
  std::mutex listing_mutex_;
  std::vector<std::pair<size_t, uint64_t>> listing_;
  double listed_at_ = -1e9;  // steady seconds
  std::atomic<uint64_t> hits_{0}, misses_{0}, rejected_{0}, writes_{0}, write_errors_{0},
      dropped_{0}, evictions_{0}, bytes_written_{0}, bytes_read_{0}, disk_bytes_{0};
  uint64_t pending_bytes_ = 0;
  std::thread writer_;
};

}  // namespace kev
