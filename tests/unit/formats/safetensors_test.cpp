#include <gtest/gtest.h>

#include <cstring>

#include "kev/core/error.h"
#include "kev/core/file.h"
#include "kev/formats/safetensors.h"

namespace kev {
namespace {

std::string header_file(const std::string& json, size_t data_bytes) {
  std::string out(8, '\0');
  uint64_t n = json.size();
  std::memcpy(out.data(), &n, 8);
  return out + json + std::string(data_bytes, '\x01');
}

void expect_refused(const std::string& bytes, const std::string& needle) {
  try {
    parse_safetensors(bytes, "t.safetensors");
    FAIL() << "accepted; expected refusal mentioning " << needle;
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kBadInput);
    EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
  }
}

TEST(Safetensors, WriterOutputParsesBack) {
  std::string path = testing::TempDir() + "/kev_st_" + std::to_string(::getpid());
  remove_tree(path);
  std::vector<TensorSpec> specs = {
      {"b", DType::kF32, {2, 3}}, {"a", DType::kBF16, {5}}, {"e", DType::kF32, {0}}};
  SafetensorsWriter w(path, specs);
  float fs[6] = {1, 2, 3, 4, 5, 6};
  uint16_t bs[5] = {1, 2, 3, 4, 5};
  w.write(fs, sizeof fs);
  w.write(bs, sizeof bs);
  std::string digest = w.finish();
  EXPECT_EQ(digest, sha256_file(path));
  SafetensorsFile f(path);
  ASSERT_EQ(f.tensors().size(), 3u);
  EXPECT_EQ(f.metadata().at("format"), "pt");
  const auto& b = f.get("b");
  EXPECT_EQ(b.dtype, DType::kF32);
  EXPECT_EQ(b.shape, (std::vector<int64_t>{2, 3}));
  EXPECT_EQ(std::memcmp(f.data(b), fs, sizeof fs), 0);
  EXPECT_EQ(std::memcmp(f.data(f.get("a")), bs, sizeof bs), 0);
  EXPECT_EQ((8 + 0u + (f.data(b) - f.file().data() - 8)) % 8, 0u);
  EXPECT_THROW(f.get("missing"), Error);
  remove_tree(path);
}

TEST(Safetensors, RefusesMalformedHeaders) {
  expect_refused("abc", "shorter than 8");
  expect_refused(header_file("{}", 0).substr(0, 9), "exceeds");
  expect_refused(header_file("[1]", 0), "not a JSON object");
  expect_refused(header_file("{\"a\":", 0), "not valid JSON");
  expect_refused(header_file(R"({"a":{"dtype":"F33","shape":[1],"data_offsets":[0,4]}})", 4),
                 "unknown dtype");
  expect_refused(header_file(R"({"a":{"dtype":"F32","shape":[-1],"data_offsets":[0,4]}})", 4),
                 "invalid dimension");
  expect_refused(header_file(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,4]}})", 4),
                 "needs 8 bytes");
  expect_refused(header_file(R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0,8]}})", 4),
                 "outside");
  expect_refused(
      header_file(
          R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},"b":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}})",
          8),
      "overlap or hole");
  expect_refused(header_file(R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}})", 8),
                 "truncated or padded");
  expect_refused(
      header_file(
          R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},"a":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}})",
          8),
      "appears twice");
  expect_refused(header_file(R"({"__metadata__":{"k":1}})", 0), "must be a string");
  expect_refused(
      header_file(R"({"a":{"dtype":"F32","shape":[4294967296,4294967296],"data_offsets":[0,4]}})",
                  4),
      "too many elements");
}

TEST(Safetensors, RefusesHeadersNestedDeeperThanTheFormat) {
  // The parser itself is iterative; what must not happen is building (and then printing or
  // walking recursively) a 200000-deep value, which would overflow the stack.
  const size_t deep = 200000;
  const std::string nested = std::string(deep, '[') + "1" + std::string(deep, ']');
  expect_refused(
      header_file(R"({"a":{"dtype":"F32","shape":)" + nested + R"(,"data_offsets":[0,4]}})", 4),
      "deeper than the format allows");
  expect_refused(
      header_file(R"({"a":{"dtype":)" + nested + R"(,"shape":[1],"data_offsets":[0,4]}})", 4),
      "deeper than the format allows");
  expect_refused(header_file(R"({"a":{"dtype":"F32","shape":[[1]],"data_offsets":[0,4]}})", 4),
                 "deeper than the format allows");
  expect_refused(header_file(R"({"__metadata__":{"k":[[1]]}})", 0),
                 "deeper than the format allows");
  // A container where a scalar belongs, at the deepest allowed level, is named by its type.
  expect_refused(header_file(R"({"a":{"dtype":[1],"shape":[1],"data_offsets":[0,4]}})", 4),
                 "unknown dtype array");
}

}  // namespace
}  // namespace kev
