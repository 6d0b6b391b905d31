#include "kev/formats/bundle_manifest.h"

#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <fstream>

#include "kev/core/error.h"
#include "kev/core/file.h"

namespace kev {
namespace {

// A fresh bundle directory holding a kev_export.json with `json`, or none (nullptr).
class Bundle {
 public:
  explicit Bundle(const char* json) {
    static int n = 0;
    dir_ = testing::TempDir() + "/kev_manifest_" + std::to_string(::getpid()) + "_" +
           std::to_string(n++);
    remove_tree(dir_);
    ::mkdir(dir_.c_str(), 0755);
    if (json) std::ofstream(dir_ + "/" + kManifestFile) << json;
  }
  ~Bundle() { remove_tree(dir_); }
  const std::string& dir() const { return dir_; }

 private:
  std::string dir_;
};

// Runs f, which must throw Error of `kind` whose message names the manifest and `needle`.
template <class F>
void expect_refused(const Bundle& b, F f, ErrorKind kind, const std::string& needle) {
  try {
    f();
    FAIL() << "accepted; expected refusal mentioning " << needle;
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), kind) << e.what();
    std::string what = e.what();
    EXPECT_NE(what.find(b.dir()), std::string::npos) << what;
    EXPECT_NE(what.find(needle), std::string::npos) << what;
  }
}

void expect_read_refused(const char* json, ErrorKind kind, const std::string& needle) {
  Bundle b(json);
  expect_refused(
      b, [&] { read_bundle_manifest(b.dir()); }, kind, needle);
}

// Reads a manifest with `json`, then expects `access` on it to refuse naming `needle`.
template <class F>
void expect_accessor_refused(const char* json, F access, const std::string& needle) {
  Bundle b(json);
  BundleManifest m = read_bundle_manifest(b.dir());
  expect_refused(
      b, [&] { access(m); }, ErrorKind::kBadInput, needle);
}

TEST(BundleManifest, RefusesMissingFile) {
  Bundle b(nullptr);
  EXPECT_FALSE(has_bundle_manifest(b.dir()));
  expect_refused(
      b, [&] { read_bundle_manifest(b.dir()); }, ErrorKind::kBadInput, kManifestFile);
}

TEST(BundleManifest, RefusesMalformedManifests) {
  expect_read_refused("{\"model\": ", ErrorKind::kBadInput, kManifestFile);
  expect_read_refused("[1, 2]", ErrorKind::kBadInput, "JSON object");
  expect_read_refused(R"({"model": "a", "model": "b"})", ErrorKind::kBadInput, "model");
}

TEST(BundleManifest, RefusesUnsupportedCheckpointField) {
  expect_read_refused(R"({"model": "m", "checkpoint_fields": {"weights": "full"}})",
                      ErrorKind::kUnsupported, "checkpoint_fields.weights");
}

TEST(BundleManifest, FullWeightFormMustAgreeWithItsField) {
  expect_read_refused(R"({"model": "m", "weights": "merged"})", ErrorKind::kUnsupported,
                      "\"weights\" is \"merged\"");
  expect_read_refused(
      R"({"model": "m", "weights": "lora", "checkpoint_fields": {"weights": "full"}})",
      ErrorKind::kUnsupported, "contradicts itself");
  expect_read_refused(
      R"({"model": "m", "weights": "full", "checkpoint_fields": {"weights": "lora"}})",
      ErrorKind::kUnsupported, "checkpoint_fields.weights");
  expect_read_refused(R"({"model": "m", "weights": "full", "weights_sha256": 3})",
                      ErrorKind::kBadInput, "weights_sha256");
}

TEST(BundleManifest, AcceptsAFullWeightBundle) {
  Bundle b(R"({"model": "kev-27b", "weights": "full", "weights_sha256": "ab",
    "checkpoint_fields": {"weights": "full", "weights_dtype": "bf16"},
    "dtypes": {"weights": "BF16", "head": "F32"}})");
  EXPECT_EQ(read_bundle_manifest(b.dir()).model(), "kev-27b");
}

TEST(BundleManifest, ReadsTypedValues) {
  Bundle b(R"({"model": "kev-4b", "temperature": 1.25,
    "base": {"repo": "Qwen/Qwen3.5-4B-Base", "revision": "abc"},
    "checkpoint": {"repo": "jaredpalmer/kev-4b"},
    "outputs": {"head.safetensors": "00ff"},
    "lora": {"rank": 16, "alpha": 32},
    "dimensions": {"hidden": 2560}})");
  EXPECT_TRUE(has_bundle_manifest(b.dir()));
  BundleManifest m = read_bundle_manifest(b.dir());
  EXPECT_EQ(m.path, b.dir() + "/" + kManifestFile);
  EXPECT_EQ(m.model(), "kev-4b");
  EXPECT_EQ(m.temperature(), 1.25);
  EXPECT_EQ(m.repo_of("base"), "Qwen/Qwen3.5-4B-Base");
  EXPECT_EQ(m.repo_of("checkpoint"), "jaredpalmer/kev-4b");
  EXPECT_EQ(m.output_sha256("head.safetensors"), "00ff");
  EXPECT_EQ(m.output_sha256("other"), std::nullopt);
  EXPECT_EQ(m.lora_rank(), 16);
  EXPECT_EQ(m.dimension("hidden"), 2560u);
  EXPECT_EQ(m.dimension("vocab"), std::nullopt);
}

TEST(BundleManifest, AbsentOptionalKeysReadAsAbsent) {
  Bundle b(R"({"model": "m", "lora": {"alpha": 32}, "base": {"revision": "abc"}})");
  BundleManifest m = read_bundle_manifest(b.dir());
  EXPECT_EQ(m.temperature(), std::nullopt);
  EXPECT_EQ(m.output_sha256("head.safetensors"), std::nullopt);
  EXPECT_EQ(m.dimension("hidden"), std::nullopt);
  EXPECT_EQ(m.repo_of("base"), "");        // the section without a repo
  EXPECT_EQ(m.repo_of("checkpoint"), "");  // no section
  EXPECT_EQ(m.lora_rank(), std::nullopt);  // the section without a rank
  Bundle none(R"({"model": "m"})");
  EXPECT_EQ(read_bundle_manifest(none.dir()).lora_rank(), std::nullopt);
}

TEST(BundleManifest, AccessorsRefuseWrongTypes) {
  auto model = [](const BundleManifest& m) { m.model(); };
  expect_accessor_refused(R"({"format": "kev-4b-merged/1"})", model, "\"model\"");
  expect_accessor_refused(R"({"model": 4})", model, "\"model\"");
  expect_accessor_refused(R"({"model": ""})", model, "\"model\"");
  expect_accessor_refused(R"({"model": "m", "temperature": "1.0"})",
                          [](const BundleManifest& m) { m.temperature(); }, "\"temperature\"");
  auto head_sha = [](const BundleManifest& m) { m.output_sha256("head.safetensors"); };
  expect_accessor_refused(R"({"model": "m", "outputs": ["x"]})", head_sha, "\"outputs\"");
  expect_accessor_refused(R"({"model": "m", "outputs": {"head.safetensors": 1}})", head_sha,
                          "outputs.head.safetensors");
  auto hidden = [](const BundleManifest& m) { m.dimension("hidden"); };
  expect_accessor_refused(R"({"model": "m", "dimensions": 3})", hidden, "\"dimensions\"");
  expect_accessor_refused(R"({"model": "m", "dimensions": {"hidden": -1}})", hidden,
                          "dimensions.hidden");
  expect_accessor_refused(R"({"model": "m", "dimensions": {"hidden": "2560"}})", hidden,
                          "dimensions.hidden");
  auto base = [](const BundleManifest& m) { m.repo_of("base"); };
  auto checkpoint = [](const BundleManifest& m) { m.repo_of("checkpoint"); };
  expect_accessor_refused(R"({"model": "m", "base": "x"})", base, "\"base\"");
  expect_accessor_refused(R"({"model": "m", "base": {"repo": 7}})", base, "base.repo");
  expect_accessor_refused(R"({"model": "m", "checkpoint": null})", checkpoint, "\"checkpoint\"");
  expect_accessor_refused(R"({"model": "m", "checkpoint": {"repo": ["a"]}})", checkpoint,
                          "checkpoint.repo");
  auto rank = [](const BundleManifest& m) { m.lora_rank(); };
  expect_accessor_refused(R"({"model": "m", "lora": 16})", rank, "\"lora\"");
  expect_accessor_refused(R"({"model": "m", "lora": {"rank": "16"}})", rank, "lora.rank");
  expect_accessor_refused(R"({"model": "m", "lora": {"rank": 16.5}})", rank, "lora.rank");
}

}  // namespace
}  // namespace kev
