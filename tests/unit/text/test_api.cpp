// API mapping: every rule and refusal. Expected answers are computed here from the documented
// formulas (REFERENCE.md section 8) in float64, not read back from the code under test.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "kev/core/error.h"
#include "kev/text/api.h"
#include "kev/text/python_compat.h"

namespace kev {
namespace {

ApiRequest req(const std::string& body) {
  return parse_request(body);
}

void expect_refused(const std::string& body, const std::string& needle) {
  try {
    parse_request(body);
    FAIL() << "accepted: " << body;
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kBadInput);
    EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
  }
}

TEST(ApiRender, ScalarsFollowPythonStr) {
  EXPECT_EQ(render(OrderedJson::parse("true")), "True");
  EXPECT_EQ(render(OrderedJson::parse("false")), "False");
  EXPECT_EQ(render(OrderedJson::parse("null")), "");
  EXPECT_EQ(render(OrderedJson::parse("12")), "12");
  EXPECT_EQ(render(OrderedJson::parse("-7")), "-7");
  EXPECT_EQ(render(OrderedJson::parse("1.0")), "1.0");
  EXPECT_EQ(render(OrderedJson::parse("0.1")), "0.1");
  EXPECT_EQ(render(OrderedJson::parse("1e-7")), "1e-07");
  EXPECT_EQ(render(OrderedJson::parse("0.0001")), "0.0001");
  EXPECT_EQ(render(OrderedJson::parse("0.00001")), "1e-05");
  EXPECT_EQ(render(OrderedJson::parse("1e16")), "1e+16");
  EXPECT_EQ(render(OrderedJson::parse("1e15")), "1000000000000000.0");
  EXPECT_EQ(render(OrderedJson::parse("123456.789")), "123456.789");
  EXPECT_EQ(render(OrderedJson::parse("-2.5e-300")), "-2.5e-300");
  EXPECT_EQ(render(OrderedJson::parse("1.7976931348623157e308")), "1.7976931348623157e+308");
  EXPECT_EQ(render(OrderedJson::parse("-0.0")), "-0.0");
  EXPECT_EQ(render(OrderedJson::parse("\"text\"")), "text");
}

TEST(ApiRender, ObjectsAndArrays) {
  auto v = OrderedJson::parse(
      R"({"b": 1, "a": {"x": [1, {"y": 2, "z": [true]}], "e": {}}, "s": " hi"})");
  // Written out by hand from the rules: `key: value`, nested `key:` then two-space indent,
  // `- item` with the item's rendering left-stripped; caller key order kept.
  EXPECT_EQ(render(v),
            "b: 1\n"
            "a:\n"
            "  x:\n"
            "    - 1\n"
            "    - y: 2\n"
            "      z:\n"
            "        - True\n"
            "  e:\n"
            "\n"
            "s:  hi");
  EXPECT_EQ(render(OrderedJson::parse(R"(["  a", "\u3000b", ["c", "d"], []])")),
            "- a\n- b\n- - c\n  - d\n- ");
}

TEST(ApiRequestMapping, OptionsInCallerOrder) {
  ApiRequest r = req(R"({"state": "s", "questions": {
      "z": {"type": "choice", "instructions": "pick", "criteria": {"b": "bee", "a": null, "c": "", "d": {"k": 1}}},
      "y": {"type": "noul", "instructions": ["x"], "criteria": {"true": "yes please", "false": 0}},
      "x": {"type": "score", "criteria": ["low", 2, null]}}})");
  EXPECT_EQ(r.model, "kev-latest");
  ASSERT_EQ(r.questions.size(), 3u);
  EXPECT_EQ(r.questions[0].id, "z");
  EXPECT_EQ(r.questions[0].options, (std::vector<std::string>{"b: bee", "a", "c", "d: k: 1"}));
  EXPECT_EQ(r.questions[0].keys, (std::vector<std::string>{"b", "a", "c", "d"}));
  EXPECT_EQ(r.questions[1].options, (std::vector<std::string>{"no: 0", "yes: yes please"}));
  EXPECT_EQ(r.questions[1].keys, (std::vector<std::string>{"false", "true"}));
  EXPECT_EQ(r.questions[1].instructions, "- x");
  EXPECT_EQ(r.questions[2].options, (std::vector<std::string>{"low", "2", ""}));
  EXPECT_EQ(r.questions[2].keys, (std::vector<std::string>{"0", "1", "2"}));
  EXPECT_EQ(r.questions[2].instructions, "");
  ApiRequest n = req(R"({"state": null, "model": "m", "questions": {"q": {"type": "noul"}}})");
  EXPECT_EQ(n.questions[0].options, (std::vector<std::string>{"no", "yes"}));
  EXPECT_EQ(n.model, "m");
  EXPECT_EQ(n.state, "");
}

TEST(ApiRequestMapping, Refusals) {
  expect_refused("{", "not valid JSON");
  expect_refused("[1]", "JSON object");
  expect_refused(R"({"questions": {"q": {"type": "noul"}}})", "state: field required");
  expect_refused(R"({"state": "s"})", "questions: field required");
  expect_refused(R"({"state": "s", "questions": {}})", "at least one question");
  expect_refused(R"({"state": "s", "questions": 3})", "must be an object");
  expect_refused(R"({"state": "s", "model": null, "questions": {"q": {"type": "noul"}}})", "model");
  expect_refused(R"({"state": "s", "questions": {"q": 1}})", "questions.q: must be an object");
  expect_refused(R"({"state": "s", "questions": {"q": {}}})", "type: must be one of");
  expect_refused(R"({"state": "s", "questions": {"q": {"type": "multi"}}})",
                 "type: must be one of");
  expect_refused(R"({"state": "s", "questions": {"q": {"type": "choice"}}})", "field required");
  expect_refused(R"({"state": "s", "questions": {"q": {"type": "choice", "criteria": null}}})",
                 "takes an object");
  expect_refused(R"({"state": "s", "questions": {"q": {"type": "choice", "criteria": {}}}})",
                 "1..255");
  expect_refused(R"({"state": "s", "questions": {"q": {"type": "score", "criteria": {"a": 1}}}})",
                 "array");
  expect_refused(R"({"state": "s", "questions": {"q": {"type": "score", "criteria": []}}})",
                 "1..255");
  expect_refused(R"({"state": "s", "questions": {"q": {"type": "noul", "criteria": [1]}}})",
                 "object or null");
  expect_refused(
      R"({"state": "s", "questions": {"q": {"type": "choice", "criteria": {"a": 1, "a": 2}}}})",
      "duplicate key");
  expect_refused(R"({"state": "s", "questions": {"q": {"type": "noul"}, "q": {"type": "noul"}}})",
                 "duplicate key");
  std::string many = R"({"state": "s", "questions": {"q": {"type": "choice", "criteria": {)";
  for (int i = 0; i < 256; ++i) many += (i ? ",\"" : "\"") + std::to_string(i) + "\": null";
  expect_refused(many + "}}}}", "1..255");
  std::string levels = R"({"state": "s", "questions": {"q": {"type": "score", "criteria": [)";
  for (int i = 0; i < 256; ++i) levels += (i ? ",1" : "1");
  expect_refused(levels + "]}}}", "1..255");
}

TEST(ApiRequestMapping, Accepts255Options) {
  std::string body = R"({"state": "s", "questions": {"q": {"type": "choice", "criteria": {)";
  for (int i = 0; i < 255; ++i) body += (i ? ",\"" : "\"") + std::to_string(i) + "\": null";
  EXPECT_EQ(req(body + "}}}}").questions[0].options.size(), 255u);
}

// Dyadic probabilities: every sum, product and quotient below is exact in binary, so the
// formulas written out here are the exact values (no summation order can change them).
TEST(ApiAnswers, FormulasOfKev10) {
  ApiRequest r = req(R"({"state": "s", "questions": {
      "c": {"type": "choice", "criteria": {"a": null, "b": null, "c": null, "d": null}},
      "n": {"type": "noul"},
      "s": {"type": "score", "criteria": ["lo", "mid", "hi", "max"]},
      "one": {"type": "choice", "criteria": {"only": null}},
      "lvl": {"type": "score", "criteria": ["single"]}}})");
  std::vector<double> pc{0.125, 0.5, 0.25, 0.125}, pn{0.375, 0.625}, ps{0.125, 0.25, 0.5, 0.125};
  OrderedJson a = answers_json(r, {pc, pn, ps, {0.25}, {0.75}}, AnswerOptions{-1});
  // choice: argmax b; confidence (pmax - 1/K) / (1 - 1/K) = (0.5 - 0.25) / 0.75.
  EXPECT_EQ(a["c"]["type"], "choice");
  EXPECT_EQ(a["c"]["choice"], "b");
  EXPECT_EQ(a["c"]["confidence"].get<double>(), 0.25 / 0.75);
  EXPECT_EQ(a["c"]["probabilities"]["c"].get<double>(), 0.25);
  EXPECT_EQ(a["n"], OrderedJson::parse(R"({"type": "noul", "noul": 0.625})"));
  // score: sum i p_i = 0.25 + 1 + 0.375; mode 2; D = (1.5 + 0.5 + 0.5 + 1.5) / 4 = 1;
  // confidence 1 - (0.125 * 2 + 0.25 * 1 + 0 + 0.125 * 1) / 1 = 0.375.
  EXPECT_EQ(a["s"]["score"].get<double>(), 1.625);
  EXPECT_EQ(a["s"]["confidence"].get<double>(), 0.375);
  EXPECT_EQ(a["s"]["legend"],
            OrderedJson::parse(R"({"0": "lo", "1": "mid", "2": "hi", "3": "max"})"));
  EXPECT_EQ(a["s"]["probabilities"]["2"].get<double>(), 0.5);
  // One option: confidence 1 whatever the probability; the score is 0 * p.
  EXPECT_EQ(a["one"]["confidence"].get<double>(), 1.0);
  EXPECT_EQ(a["lvl"]["confidence"].get<double>(), 1.0);
  EXPECT_EQ(a["lvl"]["score"].get<double>(), 0.0);
  // Key order of the answers follows the questions; of each answer, 1.0's to_answers.
  std::vector<std::string> order;
  for (auto it = a.begin(); it != a.end(); ++it) order.push_back(it.key());
  EXPECT_EQ(order, (std::vector<std::string>{"c", "n", "s", "one", "lvl"}));
  std::vector<std::string> keys;
  for (auto it = a["s"].begin(); it != a["s"].end(); ++it) keys.push_back(it.key());
  EXPECT_EQ(keys,
            (std::vector<std::string>{"type", "score", "legend", "probabilities", "confidence"}));
}

TEST(ApiAnswers, ConfidencesNormaliseFirst) {
  // Unnormalised (sum 0.5): n = 2p. choice: (0.5 - 0.25) / 0.75 as above; score: the same
  // distribution as FormulasOfKev10, so 0.375; the score itself is on the raw p.
  EXPECT_EQ(choice_confidence({0.0625, 0.25, 0.125, 0.0625}), 0.25 / 0.75);
  EXPECT_EQ(score_confidence({0.0625, 0.125, 0.25, 0.0625}), 0.375);
  EXPECT_EQ(expected_score({0.0625, 0.125, 0.25, 0.0625}), 0.8125);
  // All zero: uniform, so both confidences are 0 (score: 1 - D / D).
  EXPECT_EQ(choice_confidence({0.0, 0.0, 0.0}), 0.0);
  EXPECT_EQ(score_confidence({0.0, 0.0, 0.0, 0.0}), 0.0);
  // The issue's example: 1 - (0.2553 * 2 + 0.2264) / (2/3) < 0, so 0 (before: 0.6315).
  EXPECT_EQ(score_confidence({0.2553, 0.2264, 0.5183}), 0.0);
  // Ties: the first most likely level is the mode; the first argmax the choice.
  EXPECT_EQ(score_confidence({0.5, 0.0, 0.5}), 0.0);  // mode 0: 1 - (0.5 * 2) / (2/3) < 0
  EXPECT_EQ(score_confidence({0.5, 0.5}), 0.0);       // D = 0.5; 1 - 0.5 / 0.5
  EXPECT_EQ(score_confidence({0.0, 1.0, 0.0}), 1.0);
}

TEST(ApiAnswers, SumIsCPython312s) {
  // Values CPython >= 3.12 returns for sum() (compensated), where a left-to-right sum differs.
  EXPECT_EQ(python_sum(std::vector<double>(10, 0.1)), 1.0);  // left to right: 0.9999999999999999
  EXPECT_EQ(python_sum(std::vector<double>{1e100, 1.0, -1e100, 1.0}), 2.0);  // naive: 1.0
  // The start is the int 0: sum([-0.0]) is 0.0; an infinite or overflowed sum stays infinite.
  EXPECT_FALSE(std::signbit(python_sum(std::vector<double>{-0.0})));
  EXPECT_FALSE(std::signbit(python_sum(std::vector<double>{-0.0, -0.0})));
  const double inf = std::numeric_limits<double>::infinity();
  EXPECT_EQ(python_sum(std::vector<double>{inf, 1.0}), inf);
  EXPECT_EQ(python_sum(std::vector<double>{1e308, 1e308}), inf);
  EXPECT_EQ(python_sum(std::vector<double>{}), 0.0);
  // A compensation that is exactly representable is added at the end: 0.1 + 0.2 + 0.3.
  EXPECT_EQ(python_sum(std::vector<double>{0.1, 0.2, 0.3}),
            0.6);  // left to right: 0.6000000000000001
}

TEST(ApiAnswers, TiesPickTheFirstOptionAndRoundingIsPythons) {
  ApiRequest r = req(R"({"state": "s", "questions": {
      "c": {"type": "choice", "criteria": {"x": null, "y": null}},
      "s": {"type": "score", "criteria": ["a", "b", "c"]}}})");
  std::vector<double> pc{0.123456789, 0.876543211};
  std::vector<double> ps{0.5, 0.25, 0.25};
  OrderedJson a = answers_json(r, {{0.5, 0.5}, ps});
  EXPECT_EQ(a["c"]["choice"], "x");
  EXPECT_EQ(a["c"]["confidence"].get<double>(), 0.0);
  // mode 0, D = 2/3: 1 - (0.25 + 0.5) * 1.5 < 0.
  EXPECT_EQ(a["s"]["confidence"].get<double>(), 0.0);
  a = answers_json(r, {pc, ps});
  EXPECT_EQ(a["c"]["probabilities"]["x"].get<double>(), 0.1235);
  EXPECT_EQ(a["c"]["probabilities"]["y"].get<double>(), 0.8765);
  EXPECT_EQ(a["s"]["score"].get<double>(), 0.75);
  // Python: round(0.00005, 4) == 0.0001 (the double is just above the tie);
  // round(0.125, 2) == 0.12 (exact tie, to even); round(2.675, 2) == 2.67 (below the tie);
  // round(-1e-20, 4) == -0.0.
  EXPECT_EQ(python_round(0.00005, 4), 0.0001);
  EXPECT_EQ(python_round(0.125, 2), 0.12);
  EXPECT_EQ(python_round(2.675, 2), 2.67);
  EXPECT_TRUE(std::signbit(python_round(-1e-20, 4)));
  EXPECT_EQ(python_round(0.3333333, -1), 0.3333333);
}

TEST(ApiAnswers, MismatchedProbabilitiesAreAnInternalError) {
  ApiRequest r = req(R"({"state": "s", "questions": {"n": {"type": "noul"}}})");
  EXPECT_THROW(answers_json(r, {{0.5}}), Error);
  EXPECT_THROW(answers_json(r, {}), Error);
}

}  // namespace
}  // namespace kev

namespace kev {
namespace {

std::string nested_state(int depth) {
  return R"({"questions": {"q": {"type": "noul"}}, "state": )" + std::string(depth, '[') +
         std::string(depth, ']') + "}";
}

TEST(ApiRequestMapping, DeepNestingIsRefusedNotRecursedInto) {
  EXPECT_NO_THROW(parse_request(nested_state(kMaxJsonDepth - 2)));
  for (int depth : {kMaxJsonDepth + 1, 300000}) {
    try {
      parse_request(nested_state(depth));
      FAIL() << "depth " << depth << " accepted";
    } catch (const Error& e) {
      EXPECT_EQ(e.kind(), ErrorKind::kBadInput);
      EXPECT_NE(std::string(e.what()).find("deeper than"), std::string::npos) << e.what();
    }
  }
}

// Expected text printed by CPython 3: json.dumps({"a": 0.1, "b\"\n": [1.0, 1e-05, "é😀\x01"],
// "c": True, "d": None, "e": 12}).
TEST(ApiJson, DumpsLikePython) {
  OrderedJson v = OrderedJson::parse(
      "{\"a\": 0.1, \"b\\\"\\n\": [1.0, 1e-05, \"\xc3\xa9\xf0\x9f\x98\x80\\u0001\"], \"c\": true, "
      "\"d\": null, \"e\": 12}");
  EXPECT_EQ(
      python_json_dumps(v),
      "{\"a\": 0.1, \"b\\\"\\n\": [1.0, 1e-05, \"\\u00e9\\ud83d\\ude00\\u0001\"], \"c\": true, "
      "\"d\": null, \"e\": 12}");
}

TEST(ApiPermute, FieldsDefaultsAndRefusals) {
  const std::string req =
      R"({"state": "s", "questions": {"c": {"type": "choice", "criteria": {"a": 1, "b": 2}},)"
      R"( "n": {"type": "noul"}}})";
  PermuteRequest p = permute_request_from_json(
      OrderedJson::parse(R"({"request": )" + req + R"(, "question": "c", "extra": 1})"));
  EXPECT_EQ(p.n_perm, 6);
  EXPECT_EQ(p.seed, 0U);
  EXPECT_EQ(p.question_index, 0U);
  p = permute_request_from_json(OrderedJson::parse(R"({"request": )" + req +
                                                   R"(, "question": "c", "n_perm": 64.0,)"
                                                   R"( "seed": -9223372036854775808})"));
  EXPECT_EQ(p.n_perm, 64);
  EXPECT_EQ(p.seed, 9223372036854775808ULL);
  for (const std::string tail :
       {R"("question": "n")", R"("question": "zz")", R"("question": "c", "n_perm": 0)",
        R"("question": "c", "n_perm": 65)", R"("question": "c", "n_perm": true)",
        R"("question": "c", "seed": 0.5)"}) {
    EXPECT_THROW(
        permute_request_from_json(OrderedJson::parse(R"({"request": )" + req + ", " + tail + "}")),
        Error)
        << tail;
  }
}

}  // namespace
}  // namespace kev
