// parse_json_strict: the linear SAX builder gives exactly what nlohmann's own DOM parser gives
// (values and key order) on texts without duplicate keys, refuses duplicates at any depth, and
// enforces the per-object key and per-array element limits. nlohmann's DOM parser is the oracle.
#include <gtest/gtest.h>

#include <random>
#include <string>

#include "kev/core/error.h"
#include "kev/text/api.h"

namespace kev {
namespace {

// A random JSON value with unique keys per object (so the oracle's keep-last rule is moot).
OrderedJson random_value(std::mt19937& rng, int depth) {
  const int kind = depth > 4 ? static_cast<int>(rng() % 5) : static_cast<int>(rng() % 7);
  switch (kind) {
    case 0:
      return nullptr;
    case 1:
      return rng() % 2 == 0;
    case 2:
      return static_cast<int64_t>(rng()) - (1LL << 31);
    case 3:
      return static_cast<double>(rng()) / 7.0;
    case 4:
      return "s\u00e9" + std::to_string(rng() % 1000) + "\n\"";
    case 5: {
      OrderedJson a = OrderedJson::array();
      for (int i = static_cast<int>(rng() % 6); i > 0; --i)
        a.push_back(random_value(rng, depth + 1));
      return a;
    }
    default: {
      OrderedJson o = OrderedJson::object();
      // Keys in a non-sorted order, so that order preservation is visible.
      for (int i = static_cast<int>(rng() % 6); i > 0; --i)
        o["k" + std::to_string(i * 7919 % 13) + "_" + std::to_string(o.size())] =
            random_value(rng, depth + 1);
      return o;
    }
  }
}

TEST(JsonStrict, EqualsTheDomParserOnRandomValues) {
  std::mt19937 rng(12345);
  for (int i = 0; i < 500; ++i) {
    const std::string text = random_value(rng, 0).dump();
    const OrderedJson oracle = OrderedJson::parse(text);
    const OrderedJson got = parse_json_strict(text, "t");
    ASSERT_EQ(got, oracle) << text;
    ASSERT_EQ(got.dump(), oracle.dump()) << text;  // same key order
  }
}

TEST(JsonStrict, RefusesDuplicatesAtAnyDepthAndBadSyntax) {
  for (const char* text :
       {R"({"a":1,"a":2})", R"({"x":[{"b":1,"c":2,"b":3}]})", R"([1,{"q":{"r":null,"r":null}}])"}) {
    try {
      parse_json_strict(text, "t");
      FAIL() << text;
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("duplicate"), std::string::npos) << e.what();
    }
  }
  // The same key in sibling objects is not a duplicate.
  EXPECT_NO_THROW(parse_json_strict(R"([{"a":1},{"a":2}])", "t"));
  for (const char* text : {"{", "[1,]", R"({"a" 1})", "", "nul"}) {
    EXPECT_THROW(parse_json_strict(text, "t"), Error) << text;
  }
}

// Each refusal says where and why; a number no double holds is named as such, not as syntax.
TEST(JsonStrict, RefusalsSayWhereAndWhy) {
  auto why = [](std::string_view text) {
    try {
      parse_json_strict(text, "the line");
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string("accepted");
  };
  const std::string overflow = why(R"({"p": 1e999})");
  EXPECT_NE(overflow.find("holds the number 1e999 (byte "), std::string::npos) << overflow;
  EXPECT_NE(overflow.find("beyond the range of a double"), std::string::npos) << overflow;
  EXPECT_EQ(overflow.find("not valid JSON"), std::string::npos) << overflow;
  EXPECT_NE(why(R"({"p": NaN})").find("NaN and Infinity are not JSON numbers"), std::string::npos);
  EXPECT_NE(why(R"({"p": -Infinity})").find("NaN and Infinity"), std::string::npos);
  EXPECT_NE(why(R"({"p": [1, 2)").find("unexpected end of input"), std::string::npos);
  EXPECT_NE(why("\"a\xff\"").find("UTF-8"), std::string::npos);
  EXPECT_NE(why("").find("the line is not valid JSON"), std::string::npos);
  // Printable ASCII only, whatever the bytes were.
  for (char c : why("\"\x01\x1b[31m\xfe\"")) EXPECT_TRUE(c >= 0x20 && c < 0x7f) << int(c);
}

TEST(JsonStrict, KeyAndElementLimits) {
  const JsonLimits limits{.max_object_keys = 3, .max_array_elements = 4};
  EXPECT_NO_THROW(
      parse_json_strict(R"({"a":[1,2,3,4],"b":{"x":1,"y":2,"z":3},"c":0})", "t", limits));
  try {
    parse_json_strict(R"({"a":1,"b":2,"c":3,"d":4})", "t", limits);
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("more than 3 keys"), std::string::npos) << e.what();
  }
  try {
    parse_json_strict(R"({"a":[[1,2,3,4,5]]})", "t", limits);
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("more than 4 elements"), std::string::npos) << e.what();
  }
}

TEST(JsonStrict, DepthLimitKept) {
  std::string deep(kMaxJsonDepth, '[');
  deep += std::string(kMaxJsonDepth, ']');
  EXPECT_NO_THROW(parse_json_strict(deep, "t"));
  EXPECT_THROW(parse_json_strict("[" + deep + "]", "t"), Error);
}

}  // namespace
}  // namespace kev
