// Saved prefix states on disk (score/state_store.h, model/state_bytes.h, model/cpu_state.h).
// The oracles are independent of the code under test: the in-memory state the file was written
// from (compared float for float, block by block), a one-pass forward over the same ids (the
// prefix-reuse contract of model.h), the payload layout as cpu_state.h describes it (serialized
// here from the state's own floats), and StreamChecksum over the whole buffer at once. Every
// damaged, truncated, extended or foreign file must be refused with kev::Error, never read.
#include "kev/score/state_store.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <mutex>
#include <random>
#include <set>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "kev/core/error.h"
#include "kev/core/file.h"
#include "kev/core/sha256.h"
#include "kev/model/model.h"
#include "kev/synth/synth.h"
#include "model/cpu_state.h"

namespace kev::state_store_test {

using Ids = std::vector<int32_t>;
namespace fs = std::filesystem;

// The file's fields the tests edit, at their offsets in the 72-byte header (state_store.cpp's
// writer): the token count, the payload's size, the point's kind and the zero word after it.
constexpr size_t kHeader = 72, kLengthAt = 16, kPayloadAt = 24, kKindAt = 32, kReservedAt = 36;
constexpr size_t kTrailer = 8;

using BytesSource = MemoryStateSource;  // a whole file in memory

using Identity = std::array<unsigned char, 32>;
Identity identity_of(const std::string& text) {
  Sha256 h;
  h.update(text.data(), text.size());
  const auto d = h.digest();
  Identity out{};
  std::copy(d.begin(), d.end(), out.begin());
  return out;
}

std::string write_file(const Model& m, const Ids& ids, const PrefixState& s, PointKind kind,
                       const Identity& identity) {
  std::string out;
  write_state_file(m, StateFileKey{identity, ids, kind}, s,
                   [&](const void* p, size_t n) { out.append(static_cast<const char*>(p), n); });
  return out;
}
PrefixState read_file(const Model& m, const Ids& ids, const Identity& identity,
                      std::string_view bytes, PointKind* kind = nullptr) {
  BytesSource in(bytes);
  return read_state_file(m, StateFileKey{identity, ids}, bytes.size(), in, kind);
}

// True when reading `bytes` (claiming `file_bytes`) is refused with kev::Error; any other
// outcome (a state, another exception) is a test failure naming `what`.
bool refused(const Model& m, const Ids& ids, const Identity& identity, std::string_view bytes,
             const std::string& what, uint64_t file_bytes) {
  try {
    BytesSource in(bytes);
    read_state_file(m, StateFileKey{identity, ids}, file_bytes, in);
  } catch (const Error&) {
    return true;
  } catch (const std::exception& e) {
    ADD_FAILURE() << what << ": threw a non-kev exception: " << e.what();
    return false;
  }
  ADD_FAILURE() << what << ": a state was read";
  return false;
}
bool refused(const Model& m, const Ids& ids, const Identity& identity, std::string_view bytes,
             const std::string& what) {
  return refused(m, ids, identity, bytes, what, bytes.size());
}

template <class T>
T get_at(const std::string& b, size_t at) {
  T v;
  std::memcpy(&v, b.data() + at, sizeof v);
  return v;
}
template <class T>
void set_at(std::string& b, size_t at, T v) {
  std::memcpy(b.data() + at, &v, sizeof v);
}
template <class T>
void append(std::string& b, T v) {
  b.append(reinterpret_cast<const char*>(&v), sizeof v);
}
template <class Vec>
void append_floats(std::string& b, const Vec& v) {
  b.append(reinterpret_cast<const char*>(v.data()), v.size() * sizeof(float));
}

uint64_t checksum(std::string_view bytes) {
  StreamChecksum c;
  c.update(bytes.data(), bytes.size());
  return c.digest();
}
// Recomputes the trailer after an edit, so that only the parser's own checks can refuse it.
std::string resealed(std::string b) {
  set_at<uint64_t>(b, b.size() - kTrailer,
                   checksum(std::string_view(b).substr(0, b.size() - kTrailer)));
  return b;
}

bool same_floats(const float* a, size_t na, const float* b, size_t nb) {
  return na == nb && (na == 0 || std::memcmp(a, b, na * sizeof(float)) == 0);
}
template <class A, class B>
bool same_floats(const A& a, const B& b) {
  return same_floats(a.data(), a.size(), b.data(), b.size());
}

// Float for float, with the same blocks of the same rows.
::testing::AssertionResult same_blocks(const PrefixState& a, const PrefixState& b) {
  if (a.length != b.length)
    return ::testing::AssertionFailure() << "lengths " << a.length << " and " << b.length;
  const CpuState &x = cpu_state(a), &y = cpu_state(b);
  if (x.layers.size() != y.layers.size()) return ::testing::AssertionFailure() << "layer counts";
  for (size_t l = 0; l < x.layers.size(); ++l) {
    const LayerState &p = x.layers[l], &q = y.layers[l];
    if (p.kv.size() != q.kv.size())
      return ::testing::AssertionFailure()
             << "layer " << l << ": " << p.kv.size() << " and " << q.kv.size() << " blocks";
    for (size_t i = 0; i < p.kv.size(); ++i)
      if (!same_floats(p.kv[i]->k, q.kv[i]->k) || !same_floats(p.kv[i]->v, q.kv[i]->v))
        return ::testing::AssertionFailure() << "layer " << l << " block " << i;
    if (!same_floats(p.conv, q.conv)) return ::testing::AssertionFailure() << "conv " << l;
    if (!same_floats(p.s, q.s)) return ::testing::AssertionFailure() << "recurrent state " << l;
  }
  return ::testing::AssertionSuccess();
}
// Float for float, whatever the blocks (a one-pass state has one block per layer).
::testing::AssertionResult same_content(const PrefixState& a, const PrefixState& b) {
  if (a.length != b.length) return ::testing::AssertionFailure() << "lengths";
  const CpuState &x = cpu_state(a), &y = cpu_state(b);
  if (x.layers.size() != y.layers.size()) return ::testing::AssertionFailure() << "layer counts";
  for (size_t l = 0; l < x.layers.size(); ++l) {
    auto joined = [](const LayerState& s, bool keys) {
      std::vector<float> out;
      for (const auto& blk : s.kv) {
        const auto& part = keys ? blk->k : blk->v;
        out.insert(out.end(), part.begin(), part.end());
      }
      return out;
    };
    const LayerState &p = x.layers[l], &q = y.layers[l];
    if (!same_floats(joined(p, true), joined(q, true)) ||
        !same_floats(joined(p, false), joined(q, false)) || !same_floats(p.conv, q.conv) ||
        !same_floats(p.s, q.s))
      return ::testing::AssertionFailure() << "layer " << l;
  }
  return ::testing::AssertionSuccess();
}

// The per-layer sizes from the config (cpu_state.h's comment), not from cpu_state.cpp.
size_t kv_width(const ModelConfig& c) {
  return static_cast<size_t>(c.kv_heads * c.head_dim);
}
size_t gdn_floats(const ModelConfig& c) {
  return static_cast<size_t>((c.conv_kernel - 1) * c.conv_dim() +
                             c.linear_value_heads * c.linear_key_dim * c.linear_value_dim);
}
// The payload as cpu_state.h describes kCpuStateLayout, from the state's own floats.
std::string expected_payload(const ModelConfig& c, const PrefixState& s) {
  std::string out;
  const CpuState& st = cpu_state(s);
  for (int64_t l = 0; l < c.layers; ++l) {
    const LayerState& layer = st.layers[static_cast<size_t>(l)];
    if (is_full_attention_layer(l)) {
      append<uint32_t>(out, 1);
      append<uint64_t>(out, layer.kv.size());
      for (const auto& b : layer.kv) {
        append<uint64_t>(out, b->k.size() / kv_width(c));
        append_floats(out, b->k);
        append_floats(out, b->v);
      }
    } else {
      append<uint32_t>(out, 2);
      append_floats(out, layer.conv);
      append_floats(out, layer.s);
    }
  }
  return out;
}
// Where layer `layer`'s tag lies in a payload of a state whose blocks have these row counts.
size_t layer_offset(const ModelConfig& c, int64_t layer, const std::vector<size_t>& block_rows) {
  size_t at = 0;
  for (int64_t l = 0; l < layer; ++l) {
    at += 4;
    if (is_full_attention_layer(l)) {
      at += 8;
      for (size_t r : block_rows) at += 8 + 2 * r * kv_width(c) * sizeof(float);
    } else {
      at += gdn_floats(c) * sizeof(float);
    }
  }
  return at;
}

Ids slice(const Ids& v, size_t a, size_t b) {
  return Ids(v.begin() + static_cast<std::ptrdiff_t>(a),
             v.begin() + static_cast<std::ptrdiff_t>(b));
}
Ids joined(Ids a, const Ids& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

// One tiny synthetic model for a suite, in DIR = <tmp>/kev-state-store-test-<pid>; other shapes
// are synthesized beside it on demand.
class StateFixture : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = fs::temp_directory_path() / ("kev-state-store-test-" + std::to_string(::getpid()));
    fs::remove_all(dir_);
    fs::create_directories(dir_);
    model_ = synth_model("tiny", synth_shape("tiny"));
  }
  static void TearDownTestSuite() {
    model_.reset();
    fs::remove_all(dir_);
  }
  void TearDown() override { model_->set_options({}); }

  static std::unique_ptr<Model> synth_model(const std::string& name, const SynthShape& shape) {
    SynthOptions o;
    o.out = (dir_ / name).string();
    o.shape = shape;
    o.seed = 23;
    synthesize(o);
    return Model::load((dir_ / name / "base").string());
  }
  static Ids random_ids(size_t n, unsigned seed) {
    std::mt19937 rng(seed);
    std::uniform_int_distribution<int32_t> d(0, static_cast<int32_t>(model_->config().vocab - 1));
    Ids out(n);
    for (auto& v : out) v = d(rng);
    return out;
  }
  // ids[0:cuts[0]], ids[cuts[0]:cuts[1]], ... through separate extend() calls: one KV block each.
  static PrefixState build(const Model& m, const Ids& ids, const std::vector<size_t>& cuts) {
    PrefixState s = m.empty_state();
    size_t from = 0;
    for (size_t to : cuts) {
      s = m.extend(s, slice(ids, from, to));
      from = to;
    }
    return s;
  }
  static Identity own_identity(const Model& m) { return identity_of(m.state_identity()); }

  static inline fs::path dir_;
  static inline std::unique_ptr<Model> model_;
};

// ---- a: a file read back is the state written ----

class StateFileRoundTrip : public StateFixture {};

TEST_F(StateFileRoundTrip, EveryFloatAndEveryContinuationInEveryMode) {
  Model& m = *model_;
  const ModelConfig& c = m.config();
  const size_t h = static_cast<size_t>(c.hidden);
  struct ModeCase {
    Precision precision;
    GdnMode gdn;
  };
  const ModeCase modes[] = {{Precision::kFp32, GdnMode::kRecurrent},
                            {Precision::kFp32, GdnMode::kChunked},
                            {Precision::kInt8, GdnMode::kRecurrent},
                            {Precision::kInt8, GdnMode::kChunked},
                            {Precision::kBf16, GdnMode::kRecurrent}};
  std::set<std::string> identities;
  unsigned seed = 100;
  for (const ModeCase& mode : modes) {
    m.set_options({.gdn = mode.gdn, .threads = 2, .precision = mode.precision});
    const std::string what = m.state_identity();
    SCOPED_TRACE(what);
    identities.insert(what);
    // The chunked form continues bitwise only from multiples of its chunk (model.h).
    const bool chunked = mode.gdn == GdnMode::kChunked;
    const std::vector<size_t> cuts =
        chunked ? std::vector<size_t>{64, 128, 192} : std::vector<size_t>{23, 64, 81};
    const size_t len = cuts.back();
    const Ids all = random_ids(len + 29, seed++);
    const Ids prefix = slice(all, 0, len), tail = slice(all, len, all.size());
    const PrefixState original = build(m, prefix, cuts);
    for (int64_t l = 0; l < c.layers; ++l) {
      if (is_full_attention_layer(l)) {
        ASSERT_EQ(cpu_state(original).layers[static_cast<size_t>(l)].kv.size(), 3u) << l;
      }
    }

    const Identity identity = own_identity(m);
    const std::string file = write_file(m, prefix, original, PointKind::kTail, identity);
    // The file: header, the ids, the payload in cpu_state.h's layout, the checksum of the rest.
    const std::string payload = expected_payload(c, original);
    ASSERT_EQ(file.size(), kHeader + 4 * len + payload.size() + kTrailer);
    EXPECT_EQ(file.substr(0, 8), "KEVSTATE");  // docs/saved-states.md, "File format"
    EXPECT_EQ(get_at<uint32_t>(file, 8), kStateFileVersion);
    EXPECT_EQ(get_at<uint32_t>(file, 12), 0x01020304u);
    EXPECT_EQ(get_at<uint32_t>(file, kKindAt), 1u);  // tail
    EXPECT_EQ(get_at<uint32_t>(file, kReservedAt), 0u);
    EXPECT_EQ(std::memcmp(file.data() + 40, identity.data(), identity.size()), 0);
    EXPECT_EQ(get_at<uint64_t>(file, kLengthAt), len);
    EXPECT_EQ(get_at<uint64_t>(file, kPayloadAt), payload.size());
    EXPECT_EQ(std::memcmp(file.data() + kHeader, prefix.data(), 4 * len), 0);
    EXPECT_EQ(file.compare(kHeader + 4 * len, payload.size(), payload), 0);
    EXPECT_EQ(get_at<uint64_t>(file, file.size() - kTrailer),
              checksum(std::string_view(file).substr(0, file.size() - kTrailer)));

    PointKind kind = PointKind::kEnd;
    const PrefixState restored = read_file(m, prefix, identity, file, &kind);
    EXPECT_EQ(kind, PointKind::kTail);
    EXPECT_TRUE(same_blocks(restored, original));
    EXPECT_EQ(restored.length, original.length);
    // The same buffers' bytes (bookkeeping aside: the block lists' capacities may differ).
    auto buffer_bytes = [](const PrefixState& st) {
      size_t n = 0;
      for (const StateBuffer& b : state_buffers(st)) n += b.bytes;
      return n;
    };
    EXPECT_EQ(buffer_bytes(restored), buffer_bytes(original));
    // Written again, the restored state is the same file.
    EXPECT_TRUE(write_file(m, prefix, restored, PointKind::kTail, identity) == file);

    // Continuing: from the restored state as from the original, and as one pass over all ids.
    std::vector<float> from_original, from_restored, one_pass;
    const PrefixState cont_o = m.extend(original, tail, {}, &from_original);
    const PrefixState cont_r = m.extend(restored, tail, {}, &from_restored);
    const PrefixState one = m.extend(m.empty_state(), all, {}, &one_pass);
    EXPECT_TRUE(same_floats(from_restored, from_original));
    EXPECT_TRUE(same_blocks(cont_r, cont_o));
    ASSERT_EQ(one_pass.size(), all.size() * h);
    EXPECT_TRUE(same_floats(from_restored.data(), from_restored.size(), one_pass.data() + len * h,
                            tail.size() * h));
    EXPECT_TRUE(same_content(cont_r, one));

    std::vector<RowRequest> rows(3);
    rows[0].ids = random_ids(11, seed++);
    rows[1].ids = random_ids(1, seed++);
    rows[2].ids = random_ids(7, seed++);
    rows[2].readout = {0, 4, 6};
    const std::vector<RowResult> r_o = m.run_rows(original, rows);
    const std::vector<RowResult> r_r = m.run_rows(restored, rows);
    const std::vector<RowResult> mixed = m.run_rows({&restored, &original, &restored}, rows);
    ASSERT_EQ(r_r.size(), rows.size());
    for (size_t i = 0; i < rows.size(); ++i) {
      EXPECT_EQ(r_r[i].rows, r_o[i].rows) << i;
      EXPECT_TRUE(same_floats(r_r[i].hidden, r_o[i].hidden)) << "row " << i;
      EXPECT_TRUE(same_floats(mixed[i].hidden, r_o[i].hidden)) << "mixed row " << i;
    }
    // Row 0 against one pass over prefix + row.
    std::vector<float> row_pass;
    m.extend(m.empty_state(), joined(prefix, rows[0].ids), {}, &row_pass);
    EXPECT_TRUE(same_floats(r_r[0].hidden.data(), r_r[0].hidden.size(), row_pass.data() + len * h,
                            rows[0].ids.size() * h));
  }
  // The identity names the precision and the GDN form: no two modes read each other's files.
  EXPECT_EQ(identities.size(), std::size(modes));
}

TEST_F(StateFileRoundTrip, EveryKindAndOneTokenStates) {
  Model& m = *model_;
  const Identity identity = own_identity(m);
  for (PointKind kind : {PointKind::kEnd, PointKind::kTail, PointKind::kCheckpoint}) {
    const Ids ids = random_ids(1, 7);
    const PrefixState s = build(m, ids, {1});
    const std::string file = write_file(m, ids, s, kind, identity);
    PointKind got = kind == PointKind::kEnd ? PointKind::kCheckpoint : PointKind::kEnd;
    const PrefixState back = read_file(m, ids, identity, file, &got);
    EXPECT_EQ(got, kind);
    EXPECT_TRUE(same_blocks(back, s));
  }
}

// ---- b: anything but the file written is refused ----

class StateFileRejects : public StateFixture {
 protected:
  static constexpr size_t kLen = 20;
  static inline const std::vector<size_t> kCuts = {7, 16, 20};
  static inline const std::vector<size_t> kBlockRows = {7, 9, 4};
  void SetUp() override {
    ids_ = random_ids(kLen, 31);
    state_ = build(*model_, ids_, kCuts);
    identity_ = own_identity(*model_);
    file_ = write_file(*model_, ids_, state_, PointKind::kEnd, identity_);
    payload_at_ = kHeader + 4 * kLen;
    ASSERT_NO_THROW(read_file(*model_, ids_, identity_, file_));
  }
  bool refused_here(std::string_view bytes, const std::string& what) const {
    return refused(*model_, ids_, identity_, bytes, what);
  }
  // The first attention layer's tag, in the file.
  size_t first_attention_at() const {
    int64_t l = 0;
    while (!is_full_attention_layer(l)) ++l;
    return payload_at_ + layer_offset(model_->config(), l, kBlockRows);
  }

  Ids ids_;
  PrefixState state_;
  Identity identity_{};
  std::string file_;
  size_t payload_at_ = 0;
};

TEST_F(StateFileRejects, EveryHeaderByteAndBitFlipped) {
  size_t n = 0;
  for (size_t i = 0; i < kHeader; ++i) {
    std::string b = file_;
    b[i] = static_cast<char>(b[i] ^ 0xFF);
    n += refused_here(b, "header byte " + std::to_string(i));
    for (int bit = 0; bit < 8; ++bit) {
      std::string f = file_;
      f[i] = static_cast<char>(f[i] ^ (1 << bit));
      n += refused_here(f, "header byte " + std::to_string(i) + " bit " + std::to_string(bit));
    }
  }
  EXPECT_EQ(n, kHeader * 9);
}

TEST_F(StateFileRejects, FlipsInIdsPayloadAndTrailer) {
  std::vector<size_t> at;
  for (size_t i = kHeader; i < payload_at_; ++i) at.push_back(i);                   // every id byte
  for (size_t i = file_.size() - kTrailer; i < file_.size(); ++i) at.push_back(i);  // the trailer
  std::mt19937 rng(5);
  std::uniform_int_distribution<size_t> pos(kHeader, file_.size() - 1);
  for (int i = 0; i < 600; ++i) at.push_back(pos(rng));
  std::uniform_int_distribution<int> mask(1, 255);
  size_t n = 0;
  for (size_t p : at) {
    std::string b = file_;
    b[p] = static_cast<char>(b[p] ^ mask(rng));
    n += refused_here(b, "byte " + std::to_string(p) + " of " + std::to_string(b.size()));
  }
  EXPECT_EQ(n, at.size());
}

TEST_F(StateFileRejects, TruncatedExtendedOrMissized) {
  std::vector<size_t> lengths = {0,
                                 1,
                                 8,
                                 16,
                                 40,
                                 71,
                                 72,
                                 73,
                                 79,
                                 80,
                                 payload_at_ - 1,
                                 payload_at_,
                                 payload_at_ + 1,
                                 payload_at_ + 4,
                                 payload_at_ + 12,
                                 file_.size() / 2,
                                 file_.size() - 9,
                                 file_.size() - 8,
                                 file_.size() - 2,
                                 file_.size() - 1};
  for (size_t l = 0; l < file_.size(); l += 997) lengths.push_back(l);
  for (size_t l : lengths)
    EXPECT_TRUE(refused_here(std::string_view(file_).substr(0, l), "cut to " + std::to_string(l)));
  for (const std::string& tail : {std::string(1, '\0'), std::string(1, 'x'), std::string(8, '\0')})
    EXPECT_TRUE(refused_here(file_ + tail, "plus " + std::to_string(tail.size()) + " bytes"));
  // The caller's size and the source's disagree.
  EXPECT_TRUE(refused(*model_, ids_, identity_, file_, "size - 1", file_.size() - 1));
  EXPECT_TRUE(refused(*model_, ids_, identity_, file_, "size + 1", file_.size() + 1));
  EXPECT_TRUE(refused(*model_, ids_, identity_, file_, "size 0", 0));
}

TEST_F(StateFileRejects, OtherIdsOrIdentity) {
  const int32_t vocab = static_cast<int32_t>(model_->config().vocab);
  for (size_t i : {size_t{0}, size_t{9}, kLen - 1}) {
    Ids other = ids_;
    other[i] = (other[i] + 1) % vocab;
    EXPECT_TRUE(refused(*model_, other, identity_, file_, "id " + std::to_string(i) + " changed"));
  }
  EXPECT_TRUE(refused(*model_, slice(ids_, 0, kLen - 1), identity_, file_, "one id fewer"));
  EXPECT_TRUE(refused(*model_, joined(ids_, {1}), identity_, file_, "one id more"));
  EXPECT_TRUE(refused(*model_, {}, identity_, file_, "no ids"));
  for (size_t i : {size_t{0}, size_t{17}, size_t{31}}) {
    Identity other = identity_;
    other[i] ^= 1;
    EXPECT_TRUE(refused(*model_, ids_, other, file_, "identity byte " + std::to_string(i)));
  }
  model_->set_options({.precision = Precision::kInt8});
  EXPECT_TRUE(refused(*model_, ids_, own_identity(*model_), file_, "the int8 identity"));
}

TEST_F(StateFileRejects, FilesOfOtherShapesUnderTheSameIdentity) {
  auto shape = [](const char* base, auto edit) {
    SynthShape s = synth_shape(base);
    edit(s);
    return s;
  };
  const std::vector<std::pair<std::string, SynthShape>> shapes = {
      {"tiny-0.8b", synth_shape("tiny-0.8b")},
      {"layers-28", shape("tiny", [](SynthShape& s) { s.layers = 28; })},
      {"layers-36", shape("tiny", [](SynthShape& s) { s.layers = 36; })},
      {"kv-heads-1", shape("tiny", [](SynthShape& s) { s.kv_heads = 1; })},
      {"value-heads-2", shape("tiny", [](SynthShape& s) { s.linear_value_heads = 2; })},
      {"value-dim-16", shape("tiny", [](SynthShape& s) { s.linear_value_dim = 16; })},
  };
  for (const auto& [name, s] : shapes) {
    SCOPED_TRACE(name);
    const std::unique_ptr<Model> other = synth_model(name, s);
    ASSERT_EQ(other->config().vocab, model_->config().vocab);
    const PrefixState st = build(*other, ids_, kCuts);
    const std::string file = write_file(*other, ids_, st, PointKind::kEnd, identity_);
    EXPECT_TRUE(same_blocks(read_file(*other, ids_, identity_, file), st));  // its own: read
    EXPECT_TRUE(refused_here(file, name));
  }
}

// Edits that keep the checksum right (resealed), so that the payload's own checks must refuse.
TEST_F(StateFileRejects, PayloadCountsWithAValidChecksum) {
  ASSERT_EQ(resealed(file_), file_);
  auto with = [&](size_t at, auto value) {
    std::string b = file_;
    set_at(b, at, value);
    return resealed(b);
  };
  // The first layer's tag (GDN: 2).
  for (uint32_t tag : {0u, 1u, 3u, 0xFFFFFFFFu})
    EXPECT_TRUE(refused_here(with(payload_at_, tag), "layer 0 tag " + std::to_string(tag)));
  const size_t attn = first_attention_at();
  ASSERT_EQ(get_at<uint32_t>(file_, attn), 1u);
  ASSERT_EQ(get_at<uint64_t>(file_, attn + 4), kBlockRows.size());
  ASSERT_EQ(get_at<uint64_t>(file_, attn + 12), kBlockRows[0]);
  EXPECT_TRUE(refused_here(with(attn, uint32_t{2}), "attention layer tagged GDN"));
  for (uint64_t blocks : {uint64_t{0}, uint64_t{1}, uint64_t{2}, uint64_t{4}, uint64_t{kLen},
                          uint64_t{kLen + 1}, uint64_t{1} << 32, uint64_t{1} << 63, ~uint64_t{0}})
    EXPECT_TRUE(refused_here(with(attn + 4, blocks), "blocks " + std::to_string(blocks)));
  for (uint64_t rows : {uint64_t{0}, kBlockRows[0] - 1, kBlockRows[0] + 1, uint64_t{kLen},
                        uint64_t{kLen + 1}, uint64_t{1} << 62, ~uint64_t{0}})
    EXPECT_TRUE(refused_here(with(attn + 12, rows), "rows " + std::to_string(rows)));
  // Four bytes more (or fewer) payload than the state, the header's size agreeing.
  {
    std::string b = file_.substr(0, file_.size() - kTrailer) + std::string(4, '\0');
    set_at<uint64_t>(b, kPayloadAt, get_at<uint64_t>(b, kPayloadAt) + 4);
    EXPECT_TRUE(refused_here(resealed(b + std::string(kTrailer, '\0')), "4 bytes after"));
    std::string c = file_.substr(0, file_.size() - kTrailer - 4);
    set_at<uint64_t>(c, kPayloadAt, get_at<uint64_t>(c, kPayloadAt) - 4);
    EXPECT_TRUE(refused_here(resealed(c + std::string(kTrailer, '\0')), "4 bytes short"));
  }
  // A header of one token fewer (ids and size agreeing): the blocks hold one position too many.
  {
    std::string b = file_;
    b.erase(payload_at_ - 4, 4);
    set_at<uint64_t>(b, kLengthAt, kLen - 1);
    EXPECT_TRUE(refused(*model_, slice(ids_, 0, kLen - 1), identity_, resealed(b), "one fewer"));
  }
  // An unknown kind or a non-zero reserved word; the known kinds read back as themselves.
  for (uint32_t k : {3u, 4u, 0x80000000u})
    EXPECT_TRUE(refused_here(with(kKindAt, k), "kind " + std::to_string(k)));
  EXPECT_TRUE(refused_here(with(kReservedAt, uint32_t{1}), "reserved word"));
  for (PointKind k : {PointKind::kTail, PointKind::kCheckpoint}) {
    PointKind got = PointKind::kEnd;
    read_file(*model_, ids_, identity_, with(kKindAt, static_cast<uint32_t>(k)), &got);
    EXPECT_EQ(got, k);
  }
}

// Random payload bytes changed and resealed: refused with kev::Error or read as a state of the
// model's shape (its floats may be anything), never a crash or another exception.
TEST_F(StateFileRejects, ResealedRandomPayloadEditsReadOrRefuse) {
  const ModelConfig& c = model_->config();
  std::mt19937 rng(9);
  std::uniform_int_distribution<size_t> pos(payload_at_, file_.size() - kTrailer - 1);
  std::uniform_int_distribution<int> mask(1, 255), count(1, 4);
  size_t read = 0, refused_n = 0;
  for (int i = 0; i < 300; ++i) {
    std::string b = file_;
    for (int j = count(rng); j > 0; --j) {
      const size_t p = pos(rng);
      b[p] = static_cast<char>(b[p] ^ mask(rng));
    }
    b = resealed(b);
    try {
      const PrefixState s = read_file(*model_, ids_, identity_, b);
      ++read;
      ASSERT_EQ(s.length, static_cast<int64_t>(kLen));
      const CpuState& st = cpu_state(s);
      ASSERT_EQ(st.layers.size(), static_cast<size_t>(c.layers));
      for (int64_t l = 0; l < c.layers; ++l) {
        const LayerState& layer = st.layers[static_cast<size_t>(l)];
        if (is_full_attention_layer(l)) {
          size_t rows = 0;
          for (const auto& blk : layer.kv) {
            ASSERT_EQ(blk->k.size(), blk->v.size());
            ASSERT_EQ(blk->k.size() % kv_width(c), 0u);
            rows += blk->k.size() / kv_width(c);
          }
          ASSERT_EQ(rows, kLen) << l;
        } else {
          ASSERT_EQ(layer.conv.size() + layer.s.size(), gdn_floats(c)) << l;
        }
      }
    } catch (const Error&) {
      ++refused_n;
    }
  }
  EXPECT_EQ(read + refused_n, 300u);
  EXPECT_GT(read, 0u);  // most edits land in floats, which only the checksum guards
}

// Model::read_state alone (state_bytes.h): a count that the bytes left cannot hold is
// Error(kBadInput) before it sizes an allocation, whatever the length the caller claims.
TEST_F(StateFileRejects, ReadStateBoundsCountsByTheBytesLeft) {
  const ModelConfig& c = model_->config();
  std::string b;
  int64_t l = 0;
  for (; !is_full_attention_layer(l); ++l) {
    append<uint32_t>(b, 2);
    b.append(gdn_floats(c) * sizeof(float), '\0');
  }
  append<uint32_t>(b, 1);
  append<uint64_t>(b, uint64_t{1} << 20);  // blocks
  append<uint64_t>(b, 1);                  // the first block's rows, then nothing
  BytesSource in(b);
  EXPECT_THROW(model_->read_state(int64_t{1} << 20, in), Error);
  BytesSource empty("");
  EXPECT_THROW(model_->read_state(1, empty), Error);
  BytesSource none(b);
  EXPECT_THROW(model_->read_state(0, none), Error);
}

// The same with a length no file can claim (read_state_file bounds it at 2^24 tokens): a block
// count that the bytes left cannot hold is refused before the block list is reserved
// (state_bytes.h's contract), not met with std::bad_alloc.
TEST_F(StateFileRejects, ReadStateBoundsHugeBlockCountsByTheBytesLeft) {
  const ModelConfig& c = model_->config();
  std::string b;
  for (int64_t l = 0; !is_full_attention_layer(l); ++l) {
    append<uint32_t>(b, 2);
    b.append(gdn_floats(c) * sizeof(float), '\0');
  }
  append<uint32_t>(b, 1);
  append<uint64_t>(b, uint64_t{1} << 39);  // blocks, in 8 + 12 bytes left
  append<uint64_t>(b, 1);
  BytesSource in(b);
  EXPECT_THROW(model_->read_state(int64_t{1} << 40, in), Error);
}

// ---- c: the checksum ----

std::string random_bytes(size_t n, unsigned seed) {
  std::mt19937 rng(seed);
  std::string out(n, '\0');
  for (char& ch : out) ch = static_cast<char>(rng() & 0xFF);
  return out;
}

TEST(StateStreamChecksum, PiecesGiveTheWholeBuffersDigest) {
  for (size_t n : {0, 1, 7, 31, 32, 33, 63, 64, 65, 100, 1000, 4099}) {
    const std::string buf = random_bytes(n, static_cast<unsigned>(n) + 1);
    const uint64_t whole = checksum(buf);
    // 1-byte pieces, each after an empty update.
    {
      StreamChecksum c;
      for (size_t i = 0; i < n; ++i) {
        c.update(buf.data() + i, 0);
        c.update(buf.data() + i, 1);
      }
      EXPECT_EQ(c.digest(), whole) << n << " in 1-byte pieces";
    }
    // Pieces of fixed sizes around the stripe, and random sizes with empty updates among them.
    for (size_t piece : {2, 5, 31, 32, 33, 64, 100}) {
      StreamChecksum c;
      for (size_t i = 0; i < n; i += piece) c.update(buf.data() + i, std::min(piece, n - i));
      EXPECT_EQ(c.digest(), whole) << n << " in pieces of " << piece;
    }
    for (unsigned seed = 0; seed < 6; ++seed) {
      std::mt19937 rng(seed);
      std::uniform_int_distribution<size_t> size(0, 70);
      StreamChecksum c;
      uint64_t mid = 0;
      for (size_t i = 0; i < n;) {
        const size_t k = std::min(size(rng), n - i);
        c.update(buf.data() + i, k);
        i += k;
        mid = c.digest();  // digest() is a look, not an end: the stream goes on
      }
      (void)mid;
      EXPECT_EQ(c.digest(), whole) << n << " in random pieces, seed " << seed;
    }
  }
  StreamChecksum fresh, empty_update;
  const char byte = 0;
  empty_update.update(&byte, 0);
  EXPECT_EQ(fresh.digest(), empty_update.digest());
}

TEST(StateStreamChecksum, EverySingleBitFlipChangesTheDigest) {
  const std::string buf = random_bytes(200, 77);
  const uint64_t d = checksum(buf);
  std::set<uint64_t> seen = {d};
  for (size_t i = 0; i < buf.size(); ++i)
    for (int bit = 0; bit < 8; ++bit) {
      std::string f = buf;
      f[i] = static_cast<char>(f[i] ^ (1 << bit));
      const uint64_t e = checksum(f);
      EXPECT_NE(e, d) << "byte " << i << " bit " << bit;
      seen.insert(e);
    }
  EXPECT_EQ(seen.size(), 1601u);  // and no two flips collide either
}

TEST(StateStreamChecksum, LengthsOfZerosDiffer) {
  std::set<uint64_t> seen;
  for (size_t n = 0; n <= 300; ++n) seen.insert(checksum(std::string(n, '\0')));
  EXPECT_EQ(seen.size(), 301u);
  // And a buffer differs from itself with a zero byte more, wherever the stripe ends.
  for (size_t n : {31, 32, 33, 64}) {
    const std::string b = random_bytes(n, 3);
    EXPECT_NE(checksum(b), checksum(b + std::string(1, '\0'))) << n;
  }
}

// ---- d: the store ----

class StateStoreDir : public StateFixture {
 protected:
  void SetUp() override {
    root_ = (dir_ / ("store-" + std::to_string(::getpid()))).string();
    fs::remove_all(root_);
    all_ = random_ids(60, 51);
    s20_ = std::make_shared<const PrefixState>(build(*model_, all_, {12, 20}));
    s40_ = std::make_shared<const PrefixState>(build(*model_, all_, {12, 20, 40}));
  }
  void TearDown() override {
    WriteFaults::fail_after_bytes(UINT64_MAX);
    fs::remove_all(root_);
    StateFixture::TearDown();
  }
  StateStoreOptions options() {
    StateStoreOptions o;
    o.dir = root_;
    o.log = [this](const std::string& line) {
      std::lock_guard lock(log_mutex_);
      log_.push_back(line);
    };
    return o;
  }
  std::string digest(char c = 'a') const { return std::string(64, c); }
  static std::string expected_name(std::span<const int32_t> ids) {
    uint64_t h = kTokenHashBasis;
    for (int32_t id : ids) h = token_hash_step(h, id);
    return fmt::format("{}-{:016x}.kvs", ids.size(), h);
  }
  // The directory's files: point files and anything else (temporaries).
  static std::vector<std::string> files_in(const std::string& dir) {
    std::vector<std::string> out;
    for (const auto& e : fs::directory_iterator(dir)) out.push_back(e.path().filename().string());
    std::sort(out.begin(), out.end());
    return out;
  }
  std::span<const int32_t> first(size_t n) const { return std::span(all_).first(n); }
  void save_and_flush(StateStore& store, size_t n, PointKind kind) {
    const auto& s = n == 20 ? s20_ : s40_;
    store.save(first(n), s, kind, bytes_held(*s));
    EXPECT_EQ(store.flush(10), 0u);
  }

  std::string root_;
  Ids all_;
  std::shared_ptr<const PrefixState> s20_, s40_;
  std::mutex log_mutex_;
  std::vector<std::string> log_;
};

TEST_F(StateStoreDir, SavedPointsAreFoundByAnotherStore) {
  std::string dir;
  {
    StateStore writer(*model_, digest(), options());
    dir = writer.directory();
    save_and_flush(writer, 40, PointKind::kCheckpoint);
    save_and_flush(writer, 20, PointKind::kEnd);
    const StateStoreCounts k = writer.counts();
    EXPECT_EQ(k.writes, 2u);
    EXPECT_EQ(k.pending, 0u);
    EXPECT_EQ(k.write_errors, 0u);
    EXPECT_EQ(k.bytes_written, fs::file_size(dir + "/" + expected_name(first(40))) +
                                   fs::file_size(dir + "/" + expected_name(first(20))));
    // Saving a point on disk already writes nothing.
    save_and_flush(writer, 40, PointKind::kCheckpoint);
    EXPECT_EQ(writer.counts().writes, 2u);
  }
  EXPECT_EQ(files_in(dir), (std::vector<std::string>{expected_name(first(20)),
                                                     expected_name(first(40)), "identity.txt"}));
  {
    std::ifstream about(dir + "/identity.txt");
    const std::string text((std::istreambuf_iterator<char>(about)), {});
    EXPECT_NE(text.find(model_->state_identity()), std::string::npos) << text;
    EXPECT_NE(text.find(digest()), std::string::npos) << text;
  }

  StateStore reader(*model_, digest(), options());
  EXPECT_EQ(reader.directory(), dir);
  StateStore::Found f = reader.find_longest(all_, 0);
  ASSERT_NE(f.state, nullptr);
  EXPECT_EQ(f.length, 40u);
  EXPECT_EQ(f.kind, PointKind::kCheckpoint);
  EXPECT_TRUE(same_blocks(*f.state, *s40_));
  std::vector<float> from_disk, from_memory;
  model_->extend(*f.state, slice(all_, 40, 60), {}, &from_disk);
  model_->extend(*s40_, slice(all_, 40, 60), {}, &from_memory);
  EXPECT_TRUE(same_floats(from_disk, from_memory));
  EXPECT_EQ(reader.counts().bytes_read, fs::file_size(dir + "/" + expected_name(first(40))));

  // The query itself, longer_than below it, and the shorter point when the longer is unusable.
  EXPECT_EQ(reader.find_longest(first(40), 39).length, 40u);
  f = reader.find_longest(all_, 0, [](size_t n) { return n != 40; });
  ASSERT_NE(f.state, nullptr);
  EXPECT_EQ(f.length, 20u);
  EXPECT_EQ(f.kind, PointKind::kEnd);
  EXPECT_TRUE(same_blocks(*f.state, *s20_));
  EXPECT_EQ(reader.find_longest(all_, 20, [](size_t n) { return n != 40; }).state, nullptr);
  // Nothing: longer_than at or past every point, a usable that refuses all, a shorter query, a
  // query that leaves the points' ids, another bundle.
  EXPECT_EQ(reader.find_longest(all_, 40).state, nullptr);
  EXPECT_EQ(reader.find_longest(all_, 100).state, nullptr);
  EXPECT_EQ(reader.find_longest(all_, 0, [](size_t) { return false; }).state, nullptr);
  EXPECT_EQ(reader.find_longest(first(19), 0).state, nullptr);
  Ids changed = all_;
  changed[5] = (changed[5] + 1) % static_cast<int32_t>(model_->config().vocab);
  EXPECT_EQ(reader.find_longest(changed, 0).state, nullptr);
  const StateStoreCounts k = reader.counts();
  EXPECT_EQ(k.hits, 3u);
  EXPECT_EQ(k.misses, 6u);
  EXPECT_EQ(k.rejected, 0u);

  StateStore other(*model_, digest('b'), options());
  EXPECT_NE(other.directory(), dir);
  EXPECT_EQ(other.find_longest(all_, 0).state, nullptr);
  // Another precision is another identity (set before the store is made: it reads the model's).
  model_->set_options({.precision = Precision::kInt8});
  StateStore int8(*model_, digest(), options());
  EXPECT_NE(int8.directory(), dir);
  EXPECT_EQ(int8.find_longest(all_, 0).state, nullptr);
  EXPECT_EQ(files_in(dir).size(), 3u);  // nothing was removed
}

TEST_F(StateStoreDir, DamagedFilesAreRefusedCountedAndRemoved) {
  std::string dir;
  {
    StateStore writer(*model_, digest(), options());
    dir = writer.directory();
    save_and_flush(writer, 40, PointKind::kEnd);
    save_and_flush(writer, 20, PointKind::kEnd);
  }
  const std::string p40 = dir + "/" + expected_name(first(40));
  const std::string p20 = dir + "/" + expected_name(first(20));
  {  // one float of the 40-token point's payload, in place
    std::fstream f(p40, std::ios::in | std::ios::out | std::ios::binary);
    f.seekg(static_cast<std::streamoff>(fs::file_size(p40) / 2));
    char ch = 0;
    f.read(&ch, 1);
    f.seekp(static_cast<std::streamoff>(fs::file_size(p40) / 2));
    ch = static_cast<char>(ch ^ 0x10);
    f.write(&ch, 1);
  }
  fs::resize_file(p20, fs::file_size(p20) - 1);  // and the 20-token point cut short
  StateStore reader(*model_, digest(), options());
  EXPECT_EQ(reader.find_longest(all_, 0).state, nullptr);
  const StateStoreCounts k = reader.counts();
  EXPECT_EQ(k.rejected, 2u);
  EXPECT_EQ(k.hits, 0u);
  EXPECT_EQ(k.misses, 1u);
  EXPECT_FALSE(fs::exists(p40));
  EXPECT_FALSE(fs::exists(p20));
  std::lock_guard lock(log_mutex_);
  EXPECT_GE(log_.size(), 2u);
}

TEST_F(StateStoreDir, LongerThanSkipsWithoutReading) {
  std::string dir;
  {
    StateStore writer(*model_, digest(), options());
    dir = writer.directory();
    save_and_flush(writer, 40, PointKind::kEnd);
  }
  // Damage it: a lookup that skips it by longer_than or usable never reads (nor removes) it.
  const std::string p40 = dir + "/" + expected_name(first(40));
  fs::resize_file(p40, 10);
  StateStore reader(*model_, digest(), options());
  EXPECT_EQ(reader.find_longest(all_, 40).state, nullptr);
  EXPECT_EQ(reader.find_longest(all_, 0, [](size_t n) { return n < 40; }).state, nullptr);
  EXPECT_EQ(reader.counts().rejected, 0u);
  EXPECT_TRUE(fs::exists(p40));
  EXPECT_EQ(reader.find_longest(all_, 39).state, nullptr);
  EXPECT_EQ(reader.counts().rejected, 1u);
  EXPECT_FALSE(fs::exists(p40));
}

TEST_F(StateStoreDir, TwoWritersOfOnePointLeaveOneWholeFile) {
  StateStore a(*model_, digest(), options()), b(*model_, digest(), options());
  a.save(first(40), s40_, PointKind::kEnd, bytes_held(*s40_));
  b.save(first(40), s40_, PointKind::kEnd, bytes_held(*s40_));
  EXPECT_EQ(a.flush(10), 0u);
  EXPECT_EQ(b.flush(10), 0u);
  EXPECT_EQ(files_in(a.directory()),
            (std::vector<std::string>{expected_name(first(40)), "identity.txt"}));
  StateStore::Found f = a.find_longest(all_, 0);
  ASSERT_NE(f.state, nullptr);
  EXPECT_TRUE(same_blocks(*f.state, *s40_));
}

TEST_F(StateStoreDir, AFailedWriteLeavesNothingAndPausesSaving) {
  StateStore store(*model_, digest(), options());
  WriteFaults::fail_after_bytes(100);
  store.save(first(40), s40_, PointKind::kEnd, bytes_held(*s40_));
  EXPECT_EQ(store.flush(10), 0u);
  WriteFaults::fail_after_bytes(UINT64_MAX);
  EXPECT_EQ(store.counts().write_errors, 1u);
  EXPECT_EQ(store.counts().writes, 0u);
  EXPECT_EQ(files_in(store.directory()), std::vector<std::string>{"identity.txt"});
  // Paused (kWriteBackoffSeconds): a save now is not queued.
  store.save(first(20), s20_, PointKind::kEnd, bytes_held(*s20_));
  EXPECT_EQ(store.counts().pending, 0u);
  EXPECT_EQ(store.flush(10), 0u);
  EXPECT_EQ(store.counts().writes, 0u);
  EXPECT_EQ(store.find_longest(all_, 0).state, nullptr);
}

TEST_F(StateStoreDir, BoundsOnQueuedAndStoredBytes) {
  {
    // A point larger than the queue's bound is taken when the queue is empty; of a burst of
    // such points, each is written or dropped (which depends on the writer's pace).
    StateStoreOptions o = options();
    o.max_pending_bytes = bytes_held(*s40_) - 1;
    StateStore store(*model_, digest(), o);
    store.save(first(40), s40_, PointKind::kEnd, bytes_held(*s40_));
    EXPECT_EQ(store.flush(10), 0u);
    EXPECT_EQ(store.counts().writes, 1u);
    EXPECT_EQ(store.counts().dropped, 0u);
    std::vector<std::shared_ptr<const PrefixState>> states;
    for (size_t n = 21; n < 40; ++n)
      states.push_back(
          std::make_shared<const PrefixState>(model_->extend(*s20_, slice(all_, 20, n))));
    for (size_t n = 21; n < 40; ++n)
      store.save(first(n), states[n - 21], PointKind::kEnd, o.max_pending_bytes + 1);
    EXPECT_EQ(store.flush(10), 0u);
    const StateStoreCounts k = store.counts();
    EXPECT_EQ(k.writes + k.dropped, 20u);
    EXPECT_GE(k.writes, 2u);
    EXPECT_EQ(k.write_errors, 0u);
  }
  fs::remove_all(root_);
  {
    StateStoreOptions o = options();
    o.max_bytes = 1;  // every file written takes the directory past it
    StateStore store(*model_, digest(), o);
    save_and_flush(store, 40, PointKind::kEnd);
    const StateStoreCounts k = store.counts();
    EXPECT_EQ(k.writes, 1u);
    EXPECT_EQ(k.evictions, 1u);
    EXPECT_EQ(k.disk_bytes, 0u);
    EXPECT_EQ(files_in(store.directory()), std::vector<std::string>{"identity.txt"});
  }
  {  // The destructor writes what is queued.
    StateStoreOptions o = options();
    std::string dir;
    {
      StateStore store(*model_, digest(), o);
      dir = store.directory();
      store.save(first(20), s20_, PointKind::kEnd, bytes_held(*s20_));
    }
    EXPECT_TRUE(fs::exists(dir + "/" + expected_name(first(20))));
  }
}

}  // namespace kev::state_store_test
