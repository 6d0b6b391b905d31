// Fuzzes the saved-state file reader (score/state_store.h read_state_file, and through it the CPU
// layout's reader, model/cpu_state.h read_cpu_state) on a 4-layer synthetic model small enough
// that a whole file fits the fuzzer's inputs (3 GDN layers and one attention layer; about 2 KB
// for 3 tokens). The key's ids are the input's own (the declared count at offset 72, bounded by
// the bytes there) and its identity the model's, so an input gets past the header and id checks
// and into the payload. Each input is read twice:
//   as it is:   refused with kev::Error, or (a checksum that matches) a state of the model's shape
//               that writes back as exactly the input;
//   resealed:   with the trailer recomputed, so that only the payload's own checks can refuse it;
//               a state read must again write back as the input, and a row run on it (whatever
//               its floats) must not crash.
// Nothing else (another exception, a crash, a sanitizer report) may happen.
//
// Seeds: tests/fuzz/corpus/fuzz_state_file/, files this target's model wrote. After a change of
// the format or of the model below, write them again with
//   KEV_FUZZ_STATE_SEEDS=tests/fuzz/corpus/fuzz_state_file build/fuzz/tests/fuzz/fuzz_state_file
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <iterator>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "kev/core/error.h"
#include "kev/core/sha256.h"
#include "kev/model/model.h"
#include "kev/score/state_store.h"
#include "kev/synth/synth.h"
#include "model/cpu_state.h"

namespace {

constexpr size_t kHeader = 72, kTrailer = 8, kMaxIds = 4096;

using BytesSource = kev::MemoryStateSource;

struct Fixture {
  std::unique_ptr<kev::Model> model;
  std::array<unsigned char, 32> identity{};
};

// The model: synthesized into a temporary directory, loaded (its weights mapped), the directory
// removed at once.
const Fixture& fixture() {
  static const Fixture f = [] {
    namespace fs = std::filesystem;
    const fs::path dir =
        fs::temp_directory_path() / ("kev-fuzz-state-file-" + std::to_string(::getpid()));
    fs::remove_all(dir);
    kev::SynthOptions o;
    o.out = dir.string();
    o.seed = 3;
    o.shape = kev::synth_shape("tiny");
    o.shape.layers = 4;  // layers 0-2 GDN, 3 attention
    o.shape.kv_heads = 1;
    o.shape.linear_key_heads = 1;
    o.shape.linear_value_heads = 1;
    kev::synthesize(o);
    Fixture fx;
    fx.model = kev::Model::load((dir / "base").string(), kev::ForwardOptions{.threads = 1});
    fs::remove_all(dir);
    const std::string text = fx.model->state_identity();
    kev::Sha256 h;
    h.update(text.data(), text.size());
    const auto d = h.digest();
    std::memcpy(fx.identity.data(), d.data(), d.size());
    return fx;
  }();
  return f;
}

std::string write_file(const kev::StateFileKey& key, const kev::PrefixState& s) {
  std::string out;
  kev::write_state_file(*fixture().model, key, s, [&](const void* p, size_t n) {
    out.append(static_cast<const char*>(p), n);
  });
  return out;
}

// A state read must be of the model's shape and write back as the bytes it was read from.
void check_read(const kev::StateFileKey& key, const kev::PrefixState& s, kev::PointKind kind,
                std::string_view bytes) {
  const kev::ModelConfig& c = fixture().model->config();
  if (s.length != static_cast<int64_t>(key.ids.size())) __builtin_trap();
  kev::check_cpu_state(c, s);
  const kev::CpuState& st = kev::cpu_state(s);
  const auto kv_w = static_cast<size_t>(kev::kv_floats_per_token(c));
  for (size_t l = 0; l < st.layers.size(); ++l) {
    const kev::LayerState& layer = st.layers[l];
    if (c.full_attention[l]) {
      size_t rows = 0;
      for (const auto& b : layer.kv) {
        if (b->k.size() != b->v.size() || b->k.size() % kv_w != 0) __builtin_trap();
        rows += b->k.size() / kv_w;
      }
      if (rows != key.ids.size()) __builtin_trap();
    } else if (layer.conv.size() != static_cast<size_t>(kev::conv_history_floats(c)) ||
               layer.s.size() != static_cast<size_t>(kev::recurrent_state_floats(c))) {
      __builtin_trap();
    }
  }
  kev::StateFileKey again = key;
  again.kind = kind;
  if (write_file(again, s) != bytes) __builtin_trap();
}

// Writes the seed corpus into `dir`: states of 1, 3 and 5 tokens in 1, 2 and 3 blocks.
void write_seeds(const std::string& dir) {
  const kev::Model& m = *fixture().model;
  using Blocks = std::vector<std::vector<int32_t>>;
  const Blocks seeds[] = {{{5}}, {{7, 300}, {12}}, {{1, 2}, {3}, {4, 5}}};
  const kev::PointKind kinds[] = {kev::PointKind::kEnd, kev::PointKind::kTail,
                                  kev::PointKind::kCheckpoint};
  for (size_t i = 0; i < std::size(seeds); ++i) {
    std::vector<int32_t> ids;
    kev::PrefixState s = m.empty_state();
    for (const std::vector<int32_t>& block : seeds[i]) {
      s = m.extend(s, block);
      ids.insert(ids.end(), block.begin(), block.end());
    }
    const std::string bytes = write_file(kev::StateFileKey{fixture().identity, ids, kinds[i]}, s);
    const std::string path = dir + "/state" + std::to_string(ids.size());
    FILE* f = std::fopen(path.c_str(), "wb");
    if (!f || std::fwrite(bytes.data(), 1, bytes.size(), f) != bytes.size() || std::fclose(f)) {
      std::fprintf(stderr, "cannot write %s\n", path.c_str());
      std::exit(1);
    }
    std::fprintf(stderr, "wrote %s (%zu bytes)\n", path.c_str(), bytes.size());
  }
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  fixture();
  if (const char* dir = std::getenv("KEV_FUZZ_STATE_SEEDS")) {
    write_seeds(dir);
    std::exit(0);
  }
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const Fixture& fx = fixture();
  const std::string_view bytes(reinterpret_cast<const char*>(data), size);
  // The ids the file declares, as many as are there.
  uint64_t declared = 0;
  if (size >= 24) std::memcpy(&declared, data + 16, 8);
  const size_t there = size > kHeader ? (size - kHeader) / 4 : 0;
  const size_t n = static_cast<size_t>(std::min<uint64_t>({declared, there, kMaxIds}));
  std::vector<int32_t> ids(n);
  if (n > 0) std::memcpy(ids.data(), data + kHeader, n * 4);
  const kev::StateFileKey key{fx.identity, ids};

  // A refusal is kev::Error; a state read is checked outside the try (any exception there, a
  // kev::Error included, ends the run as a crash).
  auto read = [&](std::string_view file, kev::PointKind* kind) -> std::optional<kev::PrefixState> {
    try {
      BytesSource in(file);
      return kev::read_state_file(*fx.model, key, file.size(), in, kind);
    } catch (const kev::Error&) {
      return std::nullopt;
    }
  };
  kev::PointKind kind = kev::PointKind::kEnd;
  if (const auto s = read(bytes, &kind)) check_read(key, *s, kind, bytes);

  if (size < kHeader + kTrailer) return 0;
  std::string sealed(bytes);
  kev::StreamChecksum sum;
  sum.update(sealed.data(), sealed.size() - kTrailer);
  const uint64_t digest = sum.digest();
  std::memcpy(sealed.data() + sealed.size() - kTrailer, &digest, sizeof digest);
  if (const auto s = read(sealed, &kind)) {
    check_read(key, *s, kind, sealed);
    kev::RowRequest row;
    row.ids = {1, 2};
    const std::vector<kev::RowResult> r = fx.model->run_rows(*s, {row});
    if (r.size() != 1 || r[0].rows != 2) __builtin_trap();
  }
  return 0;
}
