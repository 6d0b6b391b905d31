// Saved points on disk (kev/score/state_store.h): the file format, the lookup, the writer thread
// and the directory's byte bound.
#include "kev/score/state_store.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <bit>
#include <cerrno>
#include <chrono>
#include <cstring>

#include <fmt/format.h>

#include "kev/core/error.h"
#include "kev/core/file.h"
#include "kev/core/sha256.h"

namespace kev {
namespace {

static_assert(std::endian::native == std::endian::little, "state files are little-endian");

constexpr char kMagic[8] = {'K', 'E', 'V', 'S', 'T', 'A', 'T', 'E'};
constexpr uint32_t kByteOrderMark = 0x01020304;
constexpr size_t kHeaderBytes = 72;  // docs/saved-states.md
constexpr size_t kChunkBytes = size_t{4} << 20;
constexpr const char* kSuffix = ".kvs";
constexpr const char* kTempPrefix = ".tmp-";
constexpr double kStaleTempSeconds = 3600;
constexpr int kRecountSeconds = 60;
constexpr double kListingSeconds = 1;  // state_store.h
// Token counts a file may claim: kev's states are at most 2^24 tokens (text/question_limits.h
// bounds them far lower); anything above is a damaged header, refused before it sizes a read.
constexpr uint64_t kMaxStateTokens = uint64_t{1} << 24;

double steady_seconds() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

uint64_t rotl(uint64_t v, int r) {
  return (v << r) | (v >> (64 - r));
}
constexpr uint64_t kP1 = 0x9E3779B185EBCA87ull, kP2 = 0xC2B2AE3D27D4EB4Full,
                   kP3 = 0x165667B19E3779F9ull;
uint64_t round_lane(uint64_t lane, uint64_t word) {
  return rotl(lane + word * kP2, 31) * kP1;
}
uint64_t load64(const unsigned char* p) {
  uint64_t v;
  std::memcpy(&v, p, 8);
  return v;
}
void stripe(uint64_t* lanes, const unsigned char* p) {
  for (int i = 0; i < 4; ++i) lanes[i] = round_lane(lanes[i], load64(p + 8 * i));
}

// What a file's name says: its token count and the hash of its ids.
std::string point_name(std::span<const int32_t> ids) {
  uint64_t h = kTokenHashBasis;
  for (int32_t id : ids) h = token_hash_step(h, id);
  return fmt::format("{}-{:016x}{}", ids.size(), h, kSuffix);
}
// Parses "<count>-<16 hex>.kvs"; false for any other name.
bool parse_point_name(const char* name, size_t* count, uint64_t* hash) {
  const std::string_view s(name);
  const size_t dash = s.find('-');
  if (dash == 0 || dash == std::string_view::npos || dash > 9 ||
      s.size() != dash + 1 + 16 + std::strlen(kSuffix) || !s.ends_with(kSuffix))
    return false;
  size_t n = 0;
  for (size_t i = 0; i < dash; ++i) {
    if (s[i] < '0' || s[i] > '9') return false;
    n = n * 10 + static_cast<size_t>(s[i] - '0');
  }
  uint64_t h = 0;
  for (size_t i = dash + 1; i < dash + 17; ++i) {
    const char c = s[i];
    const int d = c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : -1;
    if (d < 0) return false;
    h = (h << 4) | static_cast<uint64_t>(d);
  }
  *count = n;
  *hash = h;
  return true;
}

template <class T>
void put(std::string& out, T v) {
  out.append(reinterpret_cast<const char*>(&v), sizeof v);
}

// Reads a file descriptor from where it stands, within `limit` bytes.
class FileSource final : public StateSource {
 public:
  FileSource(int fd, uint64_t limit) : fd_(fd), left_(limit) {}
  void read(void* into, size_t n) override {
    if (n > left_) fail(ErrorKind::kBadInput, "the file ends {} bytes early", n - left_);
    auto* p = static_cast<char*>(into);
    size_t got = 0;
    while (got < n) {
      const ssize_t r = ::read(fd_, p + got, std::min(n - got, kChunkBytes));
      if (r < 0 && errno == EINTR) continue;
      if (r <= 0)
        fail(r == 0 ? ErrorKind::kBadInput : ErrorKind::kIo, "reading: {}",
             r == 0 ? "the file is shorter than its size" : std::strerror(errno));
      got += static_cast<size_t>(r);
    }
    left_ -= n;
  }
  size_t remaining() const override { return static_cast<size_t>(left_); }

 private:
  int fd_;
  uint64_t left_;
};

// The first `limit` bytes of another source, summed as they pass.
class SummedSource final : public StateSource {
 public:
  SummedSource(StateSource& in, uint64_t limit) : in_(in), left_(limit) {}
  void read(void* into, size_t n) override {
    if (n > left_) fail(ErrorKind::kBadInput, "a part runs {} bytes past its end", n - left_);
    in_.read(into, n);
    sum_.update(into, n);
    left_ -= n;
  }
  size_t remaining() const override { return static_cast<size_t>(left_); }
  uint64_t digest() const { return sum_.digest(); }

 private:
  StateSource& in_;
  uint64_t left_;
  StreamChecksum sum_;
};

struct Fd {
  int fd = -1;
  ~Fd() {
    if (fd >= 0) ::close(fd);
  }
};

std::string identity_text(const Model& model, const std::string& bundle_digest) {
  return fmt::format("kev saved state {}\nbundle {}\n{}\n", kStateFileVersion, bundle_digest,
                     model.state_identity());
}

}  // namespace

// ---- checksum ----

void StreamChecksum::update(const void* bytes, size_t n) {
  if (n == 0) return;
  const auto* p = static_cast<const unsigned char*>(bytes);
  total_ += n;
  if (tail_len_ > 0) {
    const size_t take = std::min(n, 32 - tail_len_);
    std::memcpy(tail_ + tail_len_, p, take);
    tail_len_ += take;
    p += take;
    n -= take;
    if (tail_len_ < 32) return;
    stripe(lanes_, tail_);
    tail_len_ = 0;
  }
  for (; n >= 32; p += 32, n -= 32) stripe(lanes_, p);
  std::memcpy(tail_, p, n);
  tail_len_ = n;
}

uint64_t StreamChecksum::digest() const {
  uint64_t h = rotl(lanes_[0], 1) + rotl(lanes_[1], 7) + rotl(lanes_[2], 12) + rotl(lanes_[3], 18);
  for (uint64_t lane : lanes_) h = (h ^ round_lane(0, lane)) * kP1 + kP3;
  h += total_;
  for (size_t i = 0; i < tail_len_; ++i) h = rotl(h ^ (tail_[i] * kP3), 11) * kP1;
  h ^= h >> 33;
  h *= kP2;
  h ^= h >> 29;
  h *= kP3;
  h ^= h >> 32;
  return h;
}

// ---- one file ----

void write_state_file(const Model& model, const StateFileKey& key, const PrefixState& state,
                      const StateSink& out) {
  if (static_cast<int64_t>(key.ids.size()) != state.length)
    fail(ErrorKind::kInternal, "{} ids for a state of {} tokens", key.ids.size(), state.length);
  // The payload's size first, from a counting pass (no bytes copied).
  uint64_t payload = 0;
  model.write_state(state, [&](const void*, size_t n) { payload += n; });
  StreamChecksum sum;
  auto emit = [&](const void* p, size_t n) {
    sum.update(p, n);
    out(p, n);
  };
  std::string head(kMagic, sizeof kMagic);
  put<uint32_t>(head, kStateFileVersion);
  put<uint32_t>(head, kByteOrderMark);
  put<uint64_t>(head, key.ids.size());
  put<uint64_t>(head, payload);
  put<uint32_t>(head, static_cast<uint32_t>(key.kind));
  put<uint32_t>(head, 0);
  head.append(reinterpret_cast<const char*>(key.identity.data()), key.identity.size());
  emit(head.data(), head.size());
  emit(key.ids.data(), key.ids.size_bytes());
  model.write_state(state, emit);
  const uint64_t digest = sum.digest();
  out(&digest, sizeof digest);
}

PrefixState read_state_file(const Model& model, const StateFileKey& key, uint64_t file_bytes,
                            StateSource& file, PointKind* kind) {
  if (file_bytes < kHeaderBytes + 8 || file.remaining() != file_bytes)
    fail(ErrorKind::kBadInput, "{} bytes: too short for a header", file_bytes);
  SummedSource in(file, file_bytes - 8);
  unsigned char head[kHeaderBytes];
  in.read(head, sizeof head);
  auto u32 = [&](size_t at) {
    uint32_t v;
    std::memcpy(&v, head + at, 4);
    return v;
  };
  auto u64 = [&](size_t at) { return load64(head + at); };
  if (std::memcmp(head, kMagic, sizeof kMagic) != 0) fail(ErrorKind::kBadInput, "not a state file");
  if (u32(8) != kStateFileVersion)
    fail(ErrorKind::kBadInput, "format version {}, this kev reads {}", u32(8), kStateFileVersion);
  if (u32(12) != kByteOrderMark) fail(ErrorKind::kBadInput, "another byte order");
  const uint64_t length = u64(16), payload = u64(24);
  if (length != key.ids.size())
    fail(ErrorKind::kBadInput, "{} tokens, its name says {}", length, key.ids.size());
  if (length < 1 || length > kMaxStateTokens)
    fail(ErrorKind::kBadInput, "{} tokens: outside 1..{}", length, kMaxStateTokens);
  if (payload > file_bytes || file_bytes - payload != kHeaderBytes + 4 * length + 8)
    fail(ErrorKind::kBadInput, "{} bytes where its header says {}", file_bytes,
         kHeaderBytes + 4 * length + 8 + std::min(payload, file_bytes));
  if (u32(32) > static_cast<uint32_t>(PointKind::kCheckpoint))
    fail(ErrorKind::kBadInput, "unknown point kind {}", u32(32));
  if (u32(36) != 0) fail(ErrorKind::kBadInput, "reserved header word {} is not zero", u32(36));
  if (std::memcmp(head + 40, key.identity.data(), key.identity.size()) != 0)
    fail(ErrorKind::kBadInput, "made by another bundle, precision, backend or format version");
  std::vector<int32_t> ids(static_cast<size_t>(length));
  in.read(ids.data(), ids.size() * sizeof(int32_t));
  if (!std::ranges::equal(ids, key.ids)) fail(ErrorKind::kBadInput, "its token ids differ");
  PrefixState state = model.read_state(static_cast<int64_t>(length), in);
  if (in.remaining() != 0) fail(ErrorKind::kBadInput, "{} bytes after the state", in.remaining());
  uint64_t stored = 0;
  file.read(&stored, sizeof stored);
  if (stored != in.digest()) fail(ErrorKind::kIntegrity, "its checksum does not match its bytes");
  if (kind) *kind = static_cast<PointKind>(u32(32));
  return state;
}

// ---- the store ----

StateStore::StateStore(const Model& model, const std::string& bundle_digest,
                       StateStoreOptions options)
    : model_(model), options_(std::move(options)) {
  Sha256 h;
  const std::string text = identity_text(model, bundle_digest);
  h.update(text.data(), text.size());
  const auto d = h.digest();
  std::copy(d.begin(), d.end(), identity_.begin());
  root_ = options_.dir;
  while (root_.size() > 1 && root_.ends_with('/')) root_.pop_back();
  std::string hex;
  for (size_t i = 0; i < 8; ++i) hex += fmt::format("{:02x}", identity_[i]);
  dir_ = root_ + "/" + hex;
  for (const std::string& d2 : {root_, dir_})
    if (::mkdir(d2.c_str(), 0755) != 0 && errno != EEXIST)
      fail(ErrorKind::kIo, "--state-dir: cannot make {}: {}", d2, std::strerror(errno));
  if (!is_directory(dir_)) fail(ErrorKind::kIo, "--state-dir: {} is not a directory", dir_);
  // The identity in words beside the files, for an operator (never read back).
  const std::string about = dir_ + "/identity.txt";
  if (!path_exists(about)) {
    const std::string tmp = fmt::format("{}/{}{}-identity", dir_, kTempPrefix, ::getpid());
    if (FILE* f = std::fopen(tmp.c_str(), "w")) {
      std::fputs(text.c_str(), f);
      if (std::fclose(f) == 0) std::rename(tmp.c_str(), about.c_str());
    }
    ::unlink(tmp.c_str());
  }
  writer_ = std::thread([this] { writer_loop(); });
}

StateStore::~StateStore() {
  flush(options_.drain_seconds);
  {
    std::lock_guard lock(mutex_);
    stopping_ = true;
  }
  wake_.notify_all();
  writer_.join();
}

std::string StateStore::file_name(std::span<const int32_t> ids) const {
  return dir_ + "/" + point_name(ids);
}

void StateStore::log(const std::string& line) const {
  if (options_.log) options_.log("kev state-dir: " + line);
}

std::vector<std::pair<size_t, uint64_t>> StateStore::listing() {
  std::lock_guard lock(listing_mutex_);
  const double now = steady_seconds();
  if (now - listed_at_ < kListingSeconds) return listing_;
  listing_.clear();
  if (DIR* d = ::opendir(dir_.c_str())) {
    while (const dirent* e = ::readdir(d)) {
      size_t n = 0;
      uint64_t h = 0;
      if (parse_point_name(e->d_name, &n, &h)) listing_.emplace_back(n, h);
    }
    ::closedir(d);
  }
  listed_at_ = now;
  return listing_;
}

void StateStore::listed(std::span<const int32_t> ids) {
  uint64_t h = kTokenHashBasis;
  for (int32_t id : ids) h = token_hash_step(h, id);
  std::lock_guard lock(listing_mutex_);
  listing_.emplace_back(ids.size(), h);
}

StateStore::Found StateStore::find_longest(std::span<const int32_t> ids, size_t longer_than,
                                           const std::function<bool(size_t)>& usable) {
  std::vector<uint64_t> hashes(ids.size() + 1);
  hashes[0] = kTokenHashBasis;
  for (size_t i = 0; i < ids.size(); ++i) hashes[i + 1] = token_hash_step(hashes[i], ids[i]);
  std::vector<size_t> candidates;
  for (const auto& [n, h] : listing())
    if (n > longer_than && n <= ids.size() && hashes[n] == h && (!usable || usable(n)))
      candidates.push_back(n);
  std::sort(candidates.rbegin(), candidates.rend());
  for (size_t n : candidates) {
    const std::string path = file_name(ids.first(n));
    try {
      Fd f{::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK)};
      if (f.fd < 0) {
        if (errno == ENOENT) continue;  // evicted or replaced since the listing
        fail(ErrorKind::kIo, "cannot open: {}", std::strerror(errno));
      }
      struct stat st {};
      if (::fstat(f.fd, &st) != 0) fail(ErrorKind::kIo, "cannot stat: {}", std::strerror(errno));
      if (!S_ISREG(st.st_mode)) continue;  // a folder or device named like a point: not ours
      const auto size = static_cast<uint64_t>(st.st_size);
      FileSource in(f.fd, size);
      PointKind kind = PointKind::kEnd;
      PrefixState state =
          read_state_file(model_, StateFileKey{identity_, ids.first(n)}, size, in, &kind);
      ::futimens(f.fd, nullptr);  // recently used (best effort: a read-only volume keeps it)
      hits_.fetch_add(1, std::memory_order_relaxed);
      bytes_read_.fetch_add(size, std::memory_order_relaxed);
      return Found{std::make_shared<const PrefixState>(std::move(state)), n, kind};
    } catch (const Error& e) {
      rejected_.fetch_add(1, std::memory_order_relaxed);
      log(fmt::format("ignored {}: {}", path, e.what()));
      if (e.kind() != ErrorKind::kIo) ::unlink(path.c_str());
    }
  }
  misses_.fetch_add(1, std::memory_order_relaxed);
  return Found{};
}

void StateStore::save(std::span<const int32_t> ids, std::shared_ptr<const PrefixState> state,
                      PointKind kind, size_t bytes) {
  if (ids.empty() || !state) return;
  const std::string name = file_name(ids);
  std::unique_lock lock(mutex_);
  if (stopping_ || steady_seconds() < paused_until_ ||
      std::ranges::find(queued_names_, name) != queued_names_.end())
    return;
  lock.unlock();
  struct stat st {};
  if (::stat(name.c_str(), &st) == 0) return;  // written already (by this process or another)
  lock.lock();
  // One point is always taken (a state larger than the bound alone would never be saved).
  if (!queue_.empty() && pending_bytes_ + bytes > options_.max_pending_bytes) {
    dropped_.fetch_add(1, std::memory_order_relaxed);
    return;
  }
  pending_bytes_ += bytes;
  queued_names_.push_back(name);
  queue_.push_back(
      Job{std::vector<int32_t>(ids.begin(), ids.end()), std::move(state), kind, bytes});
  lock.unlock();
  wake_.notify_one();
}

size_t StateStore::flush(double seconds) {
  std::unique_lock lock(mutex_);
  idle_.wait_for(lock, std::chrono::duration<double>(seconds),
                 [&] { return queue_.empty() && !writing_; });
  if (queue_.empty() && !writing_) return 0;
  // Out of time: drop the queue and abandon the file being written.
  const size_t left = queue_.size() + (writing_ ? 1 : 0);
  dropped_.fetch_add(queue_.size(), std::memory_order_relaxed);
  queue_.clear();
  queued_names_.clear();
  pending_bytes_ = 0;
  abandon_ = true;
  idle_.wait(lock, [&] { return !writing_; });
  abandon_ = false;
  return left;
}

void StateStore::writer_loop() {
  enforce_budget();
  std::unique_lock lock(mutex_);
  for (;;) {
    // Other processes write to the directory too: count it again now and then.
    if (!wake_.wait_for(lock, std::chrono::seconds(kRecountSeconds),
                        [&] { return stopping_ || !queue_.empty(); })) {
      lock.unlock();
      enforce_budget();
      lock.lock();
      continue;
    }
    if (queue_.empty()) return;  // stopping, nothing left
    Job job = std::move(queue_.front());
    queue_.pop_front();
    writing_ = true;
    lock.unlock();
    write_one(job);
    lock.lock();
    pending_bytes_ -= std::min(pending_bytes_, job.bytes);
    std::erase(queued_names_, file_name(job.ids));
    writing_ = false;
    if (queue_.empty()) idle_.notify_all();
  }
}

void StateStore::write_one(const Job& job) {
  const std::string final_name = file_name(job.ids);
  static std::atomic<uint64_t> serial{0};
  const std::string tmp =
      fmt::format("{}/{}{}-{}-{}", dir_, kTempPrefix, ::getpid(), serial++, point_name(job.ids));
  try {
    // Not fsynced: a file torn by a crash of the machine fails its checksum and is ignored.
    OutputFile f(tmp);
    std::string buffer;
    buffer.reserve(kChunkBytes);
    auto drain = [&] {
      if (abandon_) fail(ErrorKind::kInterrupted, "abandoned at the drain's deadline");
      f.write(buffer);
      buffer.clear();
    };
    StateFileKey key{identity_, job.ids, job.kind};
    write_state_file(model_, key, *job.state, [&](const void* p, size_t n) {
      const auto* c = static_cast<const char*>(p);
      while (n > 0) {
        const size_t take = std::min(n, kChunkBytes - buffer.size());
        buffer.append(c, take);
        c += take;
        n -= take;
        if (buffer.size() == kChunkBytes) drain();
      }
    });
    drain();
    f.close();
    const uint64_t written = f.bytes_written();
    if (::rename(tmp.c_str(), final_name.c_str()) != 0)
      fail(ErrorKind::kIo, "publishing {}: {}", final_name, std::strerror(errno));
    listed(job.ids);
    writes_.fetch_add(1, std::memory_order_relaxed);
    bytes_written_.fetch_add(written, std::memory_order_relaxed);
    if (disk_bytes_.fetch_add(written, std::memory_order_relaxed) + written > options_.max_bytes)
      enforce_budget();
  } catch (const Error& e) {
    ::unlink(tmp.c_str());
    if (e.kind() == ErrorKind::kInterrupted) return;
    write_errors_.fetch_add(1, std::memory_order_relaxed);
    {
      std::lock_guard lock(mutex_);
      paused_until_ = steady_seconds() + kWriteBackoffSeconds;
    }
    log(fmt::format("saving paused for {:.0f} s, serving from memory: {}", kWriteBackoffSeconds,
                    e.what()));
  }
}

void StateStore::enforce_budget() {
  struct Entry {
    std::string path;
    int64_t mtime_ns;
    uint64_t bytes;
  };
  std::vector<Entry> files;
  uint64_t total = 0;
  const auto now = std::chrono::system_clock::now().time_since_epoch();
  const double now_s = std::chrono::duration<double>(now).count();
  DIR* top = ::opendir(root_.c_str());
  if (!top) return;
  while (const dirent* sub = ::readdir(top)) {
    if (sub->d_name[0] == '.') continue;
    const std::string dir = root_ + "/" + sub->d_name;
    DIR* d = ::opendir(dir.c_str());
    if (!d) continue;
    while (const dirent* e = ::readdir(d)) {
      size_t n = 0;
      uint64_t h = 0;
      const bool temp = std::strncmp(e->d_name, kTempPrefix, std::strlen(kTempPrefix)) == 0;
      if (!temp && !parse_point_name(e->d_name, &n, &h)) continue;
      const std::string path = dir + "/" + e->d_name;
      struct stat st {};
      if (::stat(path.c_str(), &st) != 0 || !S_ISREG(st.st_mode)) continue;
      if (temp) {
        if (now_s - static_cast<double>(st.st_mtime) > kStaleTempSeconds) ::unlink(path.c_str());
        continue;
      }
      const auto bytes = static_cast<uint64_t>(st.st_size);
      total += bytes;
      files.push_back({path, int64_t{st.st_mtim.tv_sec} * 1000000000 + st.st_mtim.tv_nsec, bytes});
    }
    ::closedir(d);
  }
  ::closedir(top);
  if (total > options_.max_bytes) {
    std::sort(files.begin(), files.end(),
              [](const Entry& a, const Entry& b) { return a.mtime_ns < b.mtime_ns; });
    const uint64_t target = options_.max_bytes / 10 * 9;
    for (const Entry& e : files) {
      if (total <= target) break;
      if (::unlink(e.path.c_str()) == 0) evictions_.fetch_add(1, std::memory_order_relaxed);
      total -= e.bytes;  // gone either way (another replica may have removed it first)
    }
  }
  disk_bytes_.store(total, std::memory_order_relaxed);
}

StateStoreCounts StateStore::counts() const {
  StateStoreCounts c;
  c.hits = hits_.load();
  c.misses = misses_.load();
  c.rejected = rejected_.load();
  c.writes = writes_.load();
  c.write_errors = write_errors_.load();
  c.dropped = dropped_.load();
  c.evictions = evictions_.load();
  c.bytes_written = bytes_written_.load();
  c.bytes_read = bytes_read_.load();
  c.disk_bytes = disk_bytes_.load();
  std::lock_guard lock(mutex_);
  c.pending = queue_.size() + (writing_ ? 1 : 0);
  c.pending_bytes = pending_bytes_;
  return c;
}

}  // namespace kev
