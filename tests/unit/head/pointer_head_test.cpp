// Pointer head: the float64 formula as oracle, bit-identity across ISAs / batching / threads,
// option-order preservation, every refusal, and the head.safetensors / bundle loader.
#include "kev/head/pointer_head.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <limits>
#include <nlohmann/json.hpp>
#include <numeric>
#include <random>

#include "kev/core/error.h"
#include "kev/core/file.h"
#include "kev/core/sha256.h"
#include "kev/formats/safetensors.h"

namespace kev {
namespace {

std::vector<float> uniform(size_t n, float lo, float hi, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> dist(lo, hi);
  std::vector<float> v(n);
  for (float& x : v) x = dist(rng);
  return v;
}

PointerHeadWeights random_weights(size_t p, size_t d, uint32_t seed) {
  float a = 3.0f / std::sqrt(static_cast<float>(d));
  PointerHeadWeights w;
  w.pointer_dim = p;
  w.hidden = d;
  w.q_weight = uniform(p * d, -a, a, seed);
  w.q_bias = uniform(p, -1, 1, seed + 1);
  w.k_weight = uniform(p * d, -a, a, seed + 2);
  w.k_bias = uniform(p, -1, 1, seed + 3);
  return w;
}

// The documented formula, directly (k(h_i) . q(h_d)) / sqrt(p), in float64.
std::vector<double> reference_logits(const PointerHeadWeights& w, const float* decide,
                                     const float* options, size_t k) {
  size_t p = w.pointer_dim, d = w.hidden;
  std::vector<double> q(p);
  for (size_t r = 0; r < p; ++r) {
    double s = w.q_bias[r];
    for (size_t i = 0; i < d; ++i) s += double(w.q_weight[r * d + i]) * decide[i];
    q[r] = s;
  }
  std::vector<double> out(k);
  for (size_t o = 0; o < k; ++o) {
    double z = 0;
    for (size_t r = 0; r < p; ++r) {
      double s = w.k_bias[r];
      for (size_t i = 0; i < d; ++i) s += double(w.k_weight[r * d + i]) * options[o * d + i];
      z += s * q[r];
    }
    out[o] = z / std::sqrt(double(p));
  }
  return out;
}

bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * 4) == 0;
}

template <typename F>
void expect_refusal(F&& f, const std::string& fragment, ErrorKind kind = ErrorKind::kBadInput) {
  try {
    f();
    ADD_FAILURE() << "no refusal; expected a message containing: " << fragment;
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), kind) << e.what();
    EXPECT_NE(std::string(e.what()).find(fragment), std::string::npos) << e.what();
  }
}

TEST(PointerHead, MatchesFloat64FormulaWithinGates) {
  for (auto [p, d] : {std::pair<size_t, size_t>{32, 100}, {256, 2560}, {3, 17}, {1, 1}}) {
    PointerHeadWeights w = random_weights(p, d, 7);
    PointerHead head(w, 2.406050072164233);
    for (size_t k : {1u, 2u, 7u, 31u}) {
      auto decide = uniform(d, -1, 1, 100 + k);
      auto options = uniform(k * d, -1, 1, 200 + k);
      auto ref = reference_logits(w, decide.data(), options.data(), k);
      for (Isa isa : supported_isas()) {
        HeadWorkspace ws;
        std::vector<float> logits(k);
        head.project({decide, options, k}, logits, ws, isa);
        for (size_t i = 0; i < k; ++i)
          EXPECT_LE(std::abs(logits[i] - ref[i]), 1e-4 + 1e-5 * std::abs(ref[i]))
              << "p=" << p << " d=" << d << " k=" << k << " isa=" << isa_name(isa);
      }
    }
  }
}

TEST(PointerHead, EveryIsaIsBitIdentical) {
  auto isas = supported_isas();
  ASSERT_FALSE(isas.empty());
  for (auto [p, d] : {std::pair<size_t, size_t>{256, 2560}, {33, 47}, {5, 16}, {17, 15}}) {
    PointerHead head(random_weights(p, d, 11), 1.5);
    const size_t k = 37;
    auto decide = uniform(d, -2, 2, 1);
    auto options = uniform(k * d, -2, 2, 2);
    std::vector<float> first;
    for (Isa isa : isas) {
      HeadWorkspace ws;
      std::vector<float> logits(k);
      head.project({decide, options, k}, logits, ws, isa);
      if (first.empty()) first = logits;
      EXPECT_TRUE(same_bits(first, logits)) << isa_name(isa) << " p=" << p << " d=" << d;
    }
  }
}

struct Batch {
  std::vector<std::vector<float>> decide, options;
  std::vector<HeadQuestion> questions;
  size_t total = 0;
};

Batch make_batch(size_t n, size_t d, uint32_t seed) {
  Batch b;
  std::mt19937 rng(seed);
  for (size_t i = 0; i < n; ++i) {
    size_t k = 1 + rng() % 40;
    if (i == 3) k = 255;
    b.decide.push_back(uniform(d, -1, 1, seed * 1000 + 2 * i));
    b.options.push_back(uniform(k * d, -1, 1, seed * 1000 + 2 * i + 1));
    b.total += k;
  }
  for (size_t i = 0; i < n; ++i)
    b.questions.push_back({b.decide[i], b.options[i], b.options[i].size() / d});
  return b;
}

TEST(PointerHead, BatchEqualsOneAtATimeBitForBit) {
  const size_t p = 64, d = 200;
  PointerHead head(random_weights(p, d, 3), 2.0);
  for (size_t n : {1u, 2u, 5u, 8u, 9u, 17u, 30u}) {
    Batch b = make_batch(n, d, static_cast<uint32_t>(n));
    for (Isa isa : supported_isas()) {
      std::vector<float> single;
      HeadWorkspace ws;
      for (const auto& q : b.questions) {
        std::vector<float> l(q.num_options);
        head.project(q, l, ws, isa);
        single.insert(single.end(), l.begin(), l.end());
      }
      for (size_t workers : {1u, 2u, 3u}) {
        std::vector<float> batch(b.total);
        HeadWorkspace bws;
        head.project_batch(b.questions, batch, bws, isa, workers);
        EXPECT_TRUE(same_bits(single, batch))
            << "n=" << n << " workers=" << workers << " isa=" << isa_name(isa);
      }
    }
    // Calibration per question, never across questions.
    std::vector<float> logits(b.total), probs(b.total);
    HeadWorkspace ws;
    head.score_batch(b.questions, logits, probs, ws);
    size_t offset = 0;
    for (const auto& q : b.questions) {
      double sum = 0;
      std::vector<float> one(q.num_options);
      head.calibrate(std::span<const float>(logits).subspan(offset, q.num_options), one);
      for (size_t i = 0; i < q.num_options; ++i) {
        EXPECT_EQ(one[i], probs[offset + i]);
        sum += probs[offset + i];
      }
      EXPECT_NEAR(sum, 1.0, 1e-5);
      offset += q.num_options;
    }
  }
}

TEST(PointerHead, ReusedWorkspaceGivesTheSameBits) {
  PointerHead head(random_weights(16, 40, 5), 1.0);
  Batch b = make_batch(12, 40, 9);
  HeadWorkspace ws;
  std::vector<float> a(b.total), c(b.total);
  head.project_batch(b.questions, a, ws);
  std::vector<float> one(b.questions[0].num_options);
  head.project(b.questions[0], one, ws);  // a smaller call in between
  head.project_batch(b.questions, c, ws);
  EXPECT_TRUE(same_bits(a, c));
}

TEST(PointerHead, PermutingOptionsPermutesOutputs) {
  const size_t p = 256, d = 2560, k = 31;
  PointerHead head(random_weights(p, d, 21), 2.406050072164233);
  auto decide = uniform(d, -1, 1, 3);
  auto options = uniform(k * d, -1, 1, 4);
  std::vector<size_t> perm(k);
  std::iota(perm.begin(), perm.end(), 0);
  std::shuffle(perm.begin(), perm.end(), std::mt19937(99));
  std::vector<float> permuted(k * d);
  for (size_t i = 0; i < k; ++i)
    std::copy_n(options.begin() + perm[i] * d, d, permuted.begin() + i * d);
  HeadWorkspace ws;
  std::vector<float> l1(k), l2(k), p1(k), p2(k);
  head.project({decide, options, k}, l1, ws);
  head.project({decide, permuted, k}, l2, ws);
  head.calibrate(l1, p1);
  head.calibrate(l2, p2);
  for (size_t i = 0; i < k; ++i) {
    EXPECT_EQ(l2[i], l1[perm[i]]);
    // The softmax sum is order-dependent in its last bits; the probabilities stay within 1 ulp.
    EXPECT_NEAR(p2[i], p1[perm[i]], 1e-7);
  }
  EXPECT_NE(l1, l2);  // the permutation is not the identity, and options differ
}

TEST(Calibration, MatchesFloat64SoftmaxAndKeepsArgmax) {
  auto logits = uniform(255, -30, 30, 8);
  for (double t : {1.0, 2.406050072164233, 0.05, 1000.0}) {
    std::vector<float> probs(logits.size());
    calibrate_logits(logits, t, probs);
    double m = -INFINITY, sum = 0;
    for (float z : logits) m = std::max(m, double(z) / t);
    for (float z : logits) sum += std::exp(double(z) / t - m);
    for (size_t i = 0; i < logits.size(); ++i)
      EXPECT_NEAR(probs[i], std::exp(double(logits[i]) / t - m) / sum, 1e-7) << t;
    EXPECT_EQ(std::max_element(probs.begin(), probs.end()) - probs.begin(),
              std::max_element(logits.begin(), logits.end()) - logits.begin());
  }
  std::vector<float> one(1);
  calibrate_logits(std::vector<float>{-3.5f}, 2.0, one);
  EXPECT_EQ(one[0], 1.0f);
}

TEST(Refusals, OptionCountsHiddenSizeAndNonFiniteInputs) {
  const size_t p = 8, d = 24;
  PointerHead head(random_weights(p, d, 1), 2.0);
  HeadWorkspace ws;
  auto decide = uniform(d, -1, 1, 1);
  auto opts256 = uniform(256 * d, -1, 1, 2);
  std::vector<float> out(256);
  expect_refusal(
      [&] {
        head.project({decide, {}, 0}, std::span<float>(out).first(0), ws);
      },
      "no options");
  expect_refusal([&] { head.project({decide, opts256, 256}, out, ws); }, "256 options");
  auto short_decide = uniform(d - 1, -1, 1, 3);
  expect_refusal(
      [&] {
        head.project({short_decide, std::span(opts256).first(d), 1}, std::span(out).first(1), ws);
      },
      "hidden size is 24");
  expect_refusal(
      [&] {
        head.project({decide, std::span(opts256).first(2 * d - 1), 2},
                     std::span<float>(out).first(2), ws);
      },
      "expected 48");
  for (float bad : {std::numeric_limits<float>::quiet_NaN(), INFINITY, -INFINITY}) {
    auto d2 = decide;
    d2[5] = bad;
    expect_refusal(
        [&] {
          head.project({d2, std::span(opts256).first(d), 1}, std::span(out).first(1), ws);
        },
        "decide hidden state holds");
    auto o2 = std::vector<float>(opts256.begin(), opts256.begin() + 3 * d);
    o2[2 * d + 7] = bad;
    expect_refusal(
        [&] {
          head.project({decide, o2, 3}, std::span(out).first(3), ws);
        },
        "option 2 holds");
  }
  // A refusal anywhere in a batch refuses the whole batch.
  Batch b = make_batch(4, d, 5);
  b.questions[2].num_options = 0;
  std::vector<float> all(b.total);
  expect_refusal([&] { head.project_batch(b.questions, all, ws); }, "question 2 has no options");
  // Finite inputs whose logits overflow.
  std::vector<float> huge(d, 3e37f);
  expect_refusal([&] { head.project({huge, huge, 1}, std::span(out).first(1), ws); }, "overflowed");
}

TEST(Refusals, TemperatureAndCalibrationInputs) {
  for (double t : {0.0, -1.0, std::numeric_limits<double>::quiet_NaN(),
                   std::numeric_limits<double>::infinity()}) {
    expect_refusal([&] { PointerHead(random_weights(2, 3, 1), t); }, "temperature");
    std::vector<float> probs(2);
    expect_refusal([&] { calibrate_logits(std::vector<float>{1, 2}, t, probs); }, "temperature");
  }
  std::vector<float> probs(256);
  expect_refusal([&] { calibrate_logits({}, 1.0, std::span(probs).first(0)); }, "1 to 255");
  expect_refusal([&] { calibrate_logits(std::vector<float>(256, 0.f), 1.0, probs); }, "got 256");
  expect_refusal(
      [&] {
        calibrate_logits(std::vector<float>{1, NAN}, 1.0, std::span(probs).first(2));
      },
      "logit 1 is not finite");
}

TEST(Refusals, NonFiniteOrMisshapenWeightsNameTheTensor) {
  const char* names[4] = {"q.weight", "q.bias", "k.weight", "k.bias"};
  for (int t = 0; t < 4; ++t) {
    PointerHeadWeights w = random_weights(4, 6, 2);
    std::vector<float>* ts[4] = {&w.q_weight, &w.q_bias, &w.k_weight, &w.k_bias};
    (*ts[t])[1] = NAN;
    expect_refusal([&] { PointerHead(w, 1.0); }, std::string("tensor ") + names[t]);
    PointerHeadWeights w2 = random_weights(4, 6, 2);
    std::vector<float>* ts2[4] = {&w2.q_weight, &w2.q_bias, &w2.k_weight, &w2.k_bias};
    ts2[t]->pop_back();
    expect_refusal([&] { PointerHead(w2, 1.0); }, std::string("tensor ") + names[t]);
  }
}

// --- loading from files ---

class TempDir {
 public:
  TempDir() {
    path_ = std::filesystem::temp_directory_path() /
            ("kev-head-test-" + std::to_string(::getpid()) + "-" + std::to_string(counter_++));
    std::filesystem::create_directories(path_);
  }
  ~TempDir() { std::filesystem::remove_all(path_); }
  std::string file(const std::string& name) const { return (path_ / name).string(); }
  std::string path() const { return path_.string(); }

 private:
  static inline int counter_ = 0;
  std::filesystem::path path_;
};

struct RawTensor {
  std::string name;
  DType dtype;
  std::vector<int64_t> shape;
  std::vector<uint8_t> bytes;
};

RawTensor f32(const std::string& name, std::vector<int64_t> shape, const std::vector<float>& v) {
  RawTensor t{name, DType::kF32, std::move(shape), std::vector<uint8_t>(v.size() * 4)};
  std::memcpy(t.bytes.data(), v.data(), t.bytes.size());
  return t;
}

std::vector<RawTensor> head_tensors(const PointerHeadWeights& w) {
  int64_t p = static_cast<int64_t>(w.pointer_dim), d = static_cast<int64_t>(w.hidden);
  return {f32("q.weight", {p, d}, w.q_weight), f32("q.bias", {p}, w.q_bias),
          f32("k.weight", {p, d}, w.k_weight), f32("k.bias", {p}, w.k_bias)};
}

void write_tensors(const std::string& path, const std::vector<RawTensor>& ts) {
  std::vector<TensorSpec> specs;
  for (const auto& t : ts) specs.push_back({t.name, t.dtype, t.shape});
  SafetensorsWriter writer(path, specs);
  for (const auto& t : ts) writer.write(t.bytes.data(), t.bytes.size());
  writer.finish();
}

TEST(Loader, ReadsHeadSafetensorsAndManifest) {
  TempDir dir;
  PointerHeadWeights w = random_weights(8, 20, 4);
  write_tensors(dir.file("head.safetensors"), head_tensors(w));
  nlohmann::json manifest = {
      {"temperature", 2.406050072164233},
      {"dimensions", {{"hidden", 20}, {"pointer", 8}}},
      {"outputs", {{"head.safetensors", sha256_file(dir.file("head.safetensors"))}}}};
  write_file_synced(dir.file("kev_export.json"), manifest.dump());
  PointerHead loaded = PointerHead::load_bundle(dir.path());
  EXPECT_EQ(loaded.hidden(), 20u);
  EXPECT_EQ(loaded.pointer_dim(), 8u);
  EXPECT_EQ(loaded.temperature(), 2.406050072164233);
  PointerHead direct(w, 2.406050072164233);
  auto decide = uniform(20, -1, 1, 1);
  auto options = uniform(60, -1, 1, 2);
  std::vector<float> a(3), b(3);
  HeadWorkspace ws;
  loaded.project({decide, options, 3}, a, ws);
  direct.project({decide, options, 3}, b, ws);
  EXPECT_TRUE(same_bits(a, b));
}

TEST(Loader, RefusesBadTensorSets) {
  PointerHeadWeights w = random_weights(4, 6, 4);
  auto good = head_tensors(w);
  struct Case {
    std::vector<RawTensor> tensors;
    std::string fragment;
  };
  std::vector<Case> cases;
  for (int i = 0; i < 4; ++i) {
    auto ts = good;
    std::string name = ts[i].name;
    ts.erase(ts.begin() + i);
    cases.push_back({ts, "tensor " + name + " is missing"});
  }
  {
    auto ts = good;
    ts.push_back(f32("v.weight", {1}, {1.0f}));
    cases.push_back({ts, "unexpected tensor v.weight"});
  }
  {
    auto ts = good;
    ts[2].dtype = DType::kBF16;
    ts[2].bytes.resize(ts[2].bytes.size() / 2);
    cases.push_back({ts, "tensor k.weight is BF16, expected F32"});
  }
  {
    auto ts = good;
    ts[3] = f32("k.bias", {5}, std::vector<float>(5, 0.f));
    cases.push_back({ts, "tensor k.bias has shape [5], expected [4]"});
  }
  {
    auto ts = good;
    ts[2] = f32("k.weight", {4, 5}, std::vector<float>(20, 0.f));
    cases.push_back({ts, "tensor k.weight has shape [4, 5], expected [4, 6]"});
  }
  {
    auto ts = good;
    ts[0] = f32("q.weight", {24}, w.q_weight);
    cases.push_back({ts, "tensor q.weight has shape [24]"});
  }
  {
    auto ts = good;
    float inf = INFINITY;
    std::memcpy(ts[1].bytes.data() + 4, &inf, 4);
    cases.push_back({ts, "tensor q.bias holds a non-finite value"});
  }
  for (const auto& c : cases) {
    TempDir dir;
    write_tensors(dir.file("head.safetensors"), c.tensors);
    expect_refusal([&] { PointerHead::from_safetensors(dir.file("head.safetensors"), 1.0); },
                   c.fragment);
  }
}

TEST(Loader, RefusesBadManifests) {
  PointerHeadWeights w = random_weights(4, 6, 4);
  auto with_manifest = [&](const std::string& manifest, const std::string& fragment,
                           ErrorKind kind = ErrorKind::kBadInput) {
    TempDir dir;
    write_tensors(dir.file("head.safetensors"), head_tensors(w));
    write_file_synced(dir.file("kev_export.json"), manifest);
    expect_refusal([&] { PointerHead::load_bundle(dir.path()); }, fragment, kind);
  };
  with_manifest("{}", "\"temperature\" is missing");
  with_manifest(R"({"temperature": "2.4"})", "not a number");
  with_manifest(R"({"temperature": 0})", "finite number > 0");
  with_manifest(R"({"temperature": -2.4})", "finite number > 0");
  // A number out of double's range is refused by the strict reader (json_strict.h) itself.
  with_manifest(R"({"temperature": 1e999})", "beyond the range of a double");
  with_manifest(R"({"temperature": 2, "temperature": 3})", "duplicate key \"temperature\"");
  with_manifest("{not json", "not valid JSON");
  with_manifest(R"({"temperature": 2, "dimensions": {"hidden": 7}})", "dimensions.hidden is 7");
  with_manifest(
      R"({"temperature": 2, "outputs": {"head.safetensors": ")" + std::string(64, 'a') + "\"}}",
      "the bundle is damaged", ErrorKind::kIntegrity);
  // What a newer kev's bundle might say: refused as unsupported, naming the key and value.
  const ErrorKind kNo = ErrorKind::kUnsupported;
  with_manifest(R"({"temperature": 2, "checkpoint_fields": {"option_isolation": true}})",
                "checkpoint_fields.option_isolation is true", kNo);
  with_manifest(R"({"temperature": 2, "checkpoint_fields": {"weights_dtype": "int4"}})",
                "checkpoint_fields.weights_dtype is \"int4\"", kNo);
  with_manifest(R"({"temperature": 2, "checkpoint_fields": {"quantization": {"bits": 4}}})",
                "checkpoint_fields.quantization is {\"bits\":4}", kNo);
  with_manifest(R"({"temperature": 2, "checkpoint_fields": {"option_isolation": 0}})",
                "checkpoint_fields.option_isolation is 0", kNo);
  with_manifest(R"({"temperature": 2, "checkpoint_fields": {"sinks": false}})",
                "checkpoint_fields.sinks (false) is not a field", kNo);
  with_manifest(R"({"temperature": 2, "rope_scaling": null})", "key \"rope_scaling\" (null)", kNo);
  with_manifest(R"({"temperature": 2, "dtypes": {"weights": "F8_E4M3"}})",
                "dtypes.weights is \"F8_E4M3\"", kNo);
  with_manifest(R"({"temperature": 2, "format": "kev-4b-merged/2"})",
                "\"format\" is \"kev-4b-merged/2\"", kNo);
  with_manifest(R"({"temperature": 2, "checkpoint_fields": []})", "not an object");
}

TEST(Loader, AcceptsTheSupportedCheckpointFields) {
  PointerHeadWeights w = random_weights(4, 6, 4);
  for (const char* dtype : {"fp32", "bf16"}) {
    TempDir dir;
    write_tensors(dir.file("head.safetensors"), head_tensors(w));
    write_file_synced(dir.file("kev_export.json"),
                      std::string(R"({"temperature": 2, "format": "kev-4b-merged/1",
                        "dtypes": {"weights": "BF16", "merged_targets": "BF16",
                                   "merge_compute": "F32", "head": "F32"},
                        "checkpoint_fields": {"option_isolation": false,
                          "special_embeddings": false, "weights": "lora", "weights_dtype": ")") +
                          dtype + R"(", "multimodal": false, "quantization": null,
                          "trainable_token_indices": null}})");
    EXPECT_EQ(PointerHead::load_bundle(dir.path()).temperature(), 2.0);
  }
}

}  // namespace
}  // namespace kev
