// The strict grammars of quantized-bundle names (kev/model/quant_plan.h): a stored part's name
// after `W@` (parse_part_name) and a selection spec (parse_selection). Hand-written cases; the
// fuzz target tests/fuzz/fuzz_quant_names.cpp checks both against a regex oracle.
#include <gtest/gtest.h>

#include <optional>
#include <set>
#include <string>
#include <utility>

#include "kev/core/error.h"
#include "kev/model/quant_plan.h"

namespace kev {
namespace {

void expect_part_name(const char* suffix, int64_t rows, int64_t r0, int64_t r1, const char* kind) {
  const std::optional<PartName> p = parse_part_name(suffix, rows);
  ASSERT_TRUE(p.has_value()) << suffix;
  EXPECT_EQ(p->row0, r0) << suffix;
  EXPECT_EQ(p->row1, r1) << suffix;
  EXPECT_EQ(p->kind, kind) << suffix;
}

TEST(QuantNames, PartNamesAccepted) {
  expect_part_name("0-16.q8", 16, 0, 16, "q8");
  expect_part_name("0-1.bf16", 1, 0, 1, "bf16");
  expect_part_name("3-7.q4z", 16, 3, 7, "q4z");
  expect_part_name("10-2048.q5z", 2048, 10, 2048, "q5z");
  expect_part_name("0-5.q9", 5, 0, 5, "q9");  // unknown kinds parse; the loader names them
  expect_part_name("0-1.abcdefg", 1, 0, 1, "abcdefg");
  expect_part_name("0-999999999999999999.q4", 999999999999999999, 0, 999999999999999999, "q4");
}

TEST(QuantNames, PartNamesRefused) {
  const int64_t big = 1'000'000'000'000'000'000;
  for (const char* s : {"",
                        "0-16",
                        "0-16.",
                        "-16.q8",
                        "0-.q8",
                        "0.q8",
                        "016.q8",
                        "0-16q8",
                        "00-16.q8",
                        "0-016.q8",
                        "01-16.q8",
                        "+0-16.q8",
                        "0-+16.q8",
                        "-0-16.q8",
                        " 0-16.q8",
                        "0- 16.q8",
                        "0 -16.q8",
                        "0-16 .q8",
                        "0-16. q8",
                        "0-16.q8 ",
                        "0-16.q8\n",
                        "0-16.Q8",
                        "0-16.q_8",
                        "0-16.q8.x",
                        "0-16.abcdefgh",
                        "0x0-16.q8",
                        "0-1e1.q8",
                        "0-16-17.q8",
                        "0--16.q8",
                        "5-5.q8",
                        "6-5.q8",
                        "0-17.q8",
                        "9223372036854775807-9223372036854775808.q8",
                        "0-9223372036854775807.q8",
                        "0-1000000000000000000.q8",
                        "0-0000000000000000001.q8"})
    EXPECT_FALSE(parse_part_name(s, 16).has_value()) << '"' << s << '"';
  // More than 18 digits is refused whatever the row count.
  EXPECT_FALSE(parse_part_name("0-1000000000000000000.q8", big).has_value());
  EXPECT_FALSE(parse_part_name("0-18446744073709551632.q8", big).has_value());  // 2^64 + 16
  EXPECT_FALSE(parse_part_name(std::string("0-1\0.q8", 7), 16).has_value());
  EXPECT_FALSE(parse_part_name("0-1.q8", 0).has_value());
  EXPECT_FALSE(parse_part_name("0-1.q8", -1).has_value());
}

// The (class, layer) pairs a selection holds.
std::set<std::pair<std::string, int64_t>> selection_pairs(const LayerSelection& s, int64_t layers) {
  std::set<std::pair<std::string, int64_t>> out;
  for (int c = 0; c < kProjectionClasses; ++c)
    for (int64_t l = 0; l < layers; ++l)
      if (s.has(l, c)) out.insert({kProjectionClassNames[c], l});
  return out;
}

std::string spec_refusal(const std::string& spec, int64_t layers) {
  try {
    parse_selection(spec, layers, "--q8");
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kBadInput);
    return e.what();
  }
  ADD_FAILURE() << "accepted: " << spec;
  return "";
}

TEST(QuantNames, SpecsAccepted) {
  using Set = std::set<std::pair<std::string, int64_t>>;
  EXPECT_EQ(selection_pairs(parse_selection("", 4, "--q8"), 4), Set{});
  EXPECT_EQ(selection_pairs(parse_selection("none", 4, "--q8"), 4), Set{});
  EXPECT_EQ(selection_pairs(parse_selection(",none,,", 4, "--q8"), 4), Set{});
  EXPECT_EQ(selection_pairs(parse_selection("mlp_up@1-2", 4, "--q8"), 4),
            (Set{{"mlp_up", 1}, {"mlp_up", 2}}));
  EXPECT_EQ(selection_pairs(parse_selection("attn_o,gdn_z@0-0", 2, "--q8"), 2),
            (Set{{"attn_o", 0}, {"attn_o", 1}, {"gdn_z", 0}}));
  EXPECT_EQ(selection_pairs(parse_selection("gdn_qkv@3-3", 4, "--q8"), 4),
            (Set{{"gdn_q", 3}, {"gdn_k", 3}, {"gdn_v", 3}}));
  EXPECT_EQ(selection_pairs(parse_selection("all@10-10", 11, "--q8"), 11).size(), 12u);
  EXPECT_EQ(selection_pairs(parse_selection("all", 3, "--q8"), 3).size(), 36u);
  // What the defaults write parses back.
  EXPECT_EQ(selection_pairs(parse_selection(int8_default_spec(8), 8, "--q8"), 8).size(), 10u * 6);
  EXPECT_EQ(selection_pairs(parse_selection(bf16_default_spec(), 8, "--q8"), 8).size(), 10u * 8);
}

TEST(QuantNames, SpecsRefused) {
  const std::string range = "expected class@first-last within layers 0-31";
  for (const char* s : {"all@ 3- 5",
                        "all@3- 5",
                        "all@+1-2",
                        "all@1-+2",
                        "all@-0-3",
                        "all@0--3",
                        "all@03-05",
                        "all@3-05",
                        "all@00-1",
                        "all@3",
                        "all@",
                        "all@-",
                        "all@3-",
                        "all@-3",
                        "all@3-5 ",
                        "all@3-5x",
                        "all@3-5@6",
                        "all@1 -2",
                        "all@0x1-2",
                        "all@5-3",
                        "all@0-32",
                        "all@0-9223372036854775807",
                        "all@0-18446744073709551616",
                        "all@0-99999999999999999999999",
                        "all@9223372036854775808-9223372036854775809",
                        "all@0000000000000000000-1",
                        "mlp_up,all@+1-2"}) {
    const std::string e = spec_refusal(s, 32);
    EXPECT_NE(e.find("--q8 entry '"), std::string::npos) << s << ": " << e;
    EXPECT_NE(e.find(range), std::string::npos) << s << ": " << e;
  }
  for (const char* s : {"mlp_sideways", " mlp_up", "mlp_up ", "MLP_UP", "none@1-2", "@1-2", "all_",
                        "mlp_up,attn", "gdn_qk@1-2"}) {
    const std::string e = spec_refusal(s, 32);
    EXPECT_NE(e.find("--q8: unknown projection class '"), std::string::npos) << s << ": " << e;
  }
  // A range is checked before its class.
  EXPECT_NE(spec_refusal("mlp_sideways@1-99", 32).find(range), std::string::npos);
  EXPECT_NE(spec_refusal("mlp_sideways@1-2", 32).find("unknown projection class 'mlp_sideways'"),
            std::string::npos);
}

}  // namespace
}  // namespace kev
