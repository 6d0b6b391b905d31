#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <optional>
#include <string>

#include "kev/acceptance/bench.h"
#include "kev/acceptance/calibration.h"
#include "kev/acceptance/compare.h"
#include "kev/acceptance/labels.h"
#include "kev/acceptance/results.h"
#include "kev/core/error.h"

namespace kev {
namespace {

// numpy.percentile(x, q) by its definition (linear: position q/100 * (n-1) in the sorted values),
// worked by hand for these inputs.
TEST(Percentile, LinearInterpolationAsNumpy) {
  EXPECT_DOUBLE_EQ(percentile({4, 1, 3, 2}, 50), 2.5);   // position 1.5
  EXPECT_DOUBLE_EQ(percentile({4, 1, 3, 2}, 90), 3.7);   // position 2.7
  EXPECT_DOUBLE_EQ(percentile({4, 1, 3, 2}, 100), 4.0);  // the maximum
  EXPECT_DOUBLE_EQ(percentile({4, 1, 3, 2}, 0), 1.0);
  EXPECT_DOUBLE_EQ(percentile({7}, 99), 7.0);
  EXPECT_DOUBLE_EQ(percentile({}, 50), 0.0);
}

ResultFile parse(const std::string& text) {
  return parse_result_file(text, "t.jsonl");
}

TEST(Results, ShapesAndRefusals) {
  const ResultFile f = parse(
      "{\"answers\":{\"q\":{\"type\":\"noul\",\"noul\":0.25}}}\n\n"
      "{\"id\":5,\"status\":503,\"response\":{\"detail\":\"busy\"}}\n");
  ASSERT_EQ(f.records.size(), 2u);
  EXPECT_TRUE(f.records[0].ok);
  EXPECT_EQ(f.records[0].answers[0].keys, (std::vector<std::string>{"no", "yes"}));
  EXPECT_DOUBLE_EQ(f.records[0].answers[0].probs[0], 0.75);
  EXPECT_FALSE(f.records[1].ok);
  EXPECT_EQ(*f.records[1].id, "5");
  EXPECT_EQ(f.records[1].status, 503);
  EXPECT_EQ(f.records[1].line, 3u);
  for (const char* bad : {"{", "[1]", "{\"answers\":{}}", "{\"answers\":{\"q\":{\"type\":\"x\"}}}",
                          "{\"answers\":{\"q\":{\"type\":\"noul\",\"noul\":-0.1}}}",
                          "{\"answers\":{\"q\":{\"type\":\"choice\",\"probabilities\":{\"a\":"
                          "1e999}}}}",
                          "{\"id\":[1],\"answers\":{\"q\":{\"type\":\"noul\",\"noul\":0}}}"}) {
    try {
      parse(bad);
      ADD_FAILURE() << bad;
    } catch (const Error& e) {
      EXPECT_EQ(e.kind(), ErrorKind::kBadInput) << bad;
      EXPECT_NE(std::string(e.what()).find("t.jsonl line 1"), std::string::npos) << e.what();
    }
  }
}

TEST(Compare, KnownDriftByHand) {
  const ResultFile a = parse(
      "{\"answers\":{\"c\":{\"type\":\"choice\",\"confidence\":0.1,\"probabilities\":{\"x\":0.5,"
      "\"y\":0.3,\"z\":0.2}}}}\n");
  const ResultFile b = parse(
      "{\"answers\":{\"c\":{\"type\":\"choice\",\"confidence\":0.15,\"probabilities\":{\"z\":0.1,"
      "\"y\":0.45,\"x\":0.45}}}}\n");
  const CompareReport r = compare_results(a, b);
  ASSERT_EQ(r.questions.size(), 1u);
  const QuestionDrift& d = r.questions[0];
  EXPECT_NEAR(d.max_dp, 0.15, 1e-15);  // y: 0.45 - 0.3
  EXPECT_NEAR(d.margin, 0.2, 1e-15);   // 0.5 - 0.3
  EXPECT_EQ(d.argmax_a, "x");
  EXPECT_EQ(d.argmax_b, "x");  // tie 0.45 / 0.45: the earlier option in A's order
  EXPECT_FALSE(d.flip);
  EXPECT_NEAR(*d.confidence_drift, 0.05, 1e-15);
  EXPECT_FALSE(d.score_drift.has_value());
}

// Two options, logits (0, 0) and (2, 0), labels 0 and 1, T = 1: p = (1/2, 1/2) and
// (e^2/(1+e^2), 1/(1+e^2)) = (0.880797, 0.119203), worked by hand.
TEST(Calibration, MetricsByHand) {
  const std::vector<LabelledLogits> s = {{{0.0, 0.0}, 0}, {{2.0, 0.0}, 1}};
  const CalibrationMetrics m = calibration_metrics(s, 1.0, 10);
  const double hi = std::exp(2.0) / (1 + std::exp(2.0)), lo = 1 - hi;
  EXPECT_DOUBLE_EQ(m.accuracy, 0.5);  // the tie goes to option 0: right; the second: wrong
  EXPECT_NEAR(m.mean_confidence, (0.5 + hi) / 2, 1e-15);
  EXPECT_NEAR(m.nll, (std::log(2.0) - std::log(lo)) / 2, 1e-15);
  EXPECT_NEAR(m.brier, (0.5 + hi * hi + (lo - 1) * (lo - 1)) / 2, 1e-15);
  // Bins: 0.5 -> bin 5 (accuracy 1), 0.8808 -> bin 8 (accuracy 0).
  EXPECT_EQ(m.bins[5].count, 1u);
  EXPECT_EQ(m.bins[8].count, 1u);
  EXPECT_NEAR(m.ece, 0.5 * std::fabs(1 - 0.5) + 0.5 * std::fabs(0 - hi), 1e-15);
  EXPECT_THROW(calibration_metrics(s, 0.0, 10), Error);
  EXPECT_THROW(calibration_metrics({}, 1.0, 10), Error);
  EXPECT_THROW(calibration_metrics(std::vector<LabelledLogits>{{{1.0}, 1}}, 1.0, 10), Error);
}

// Logits (1, 0) twice, labelled 0 and 1: NLL(beta) = (log(1 + e^-beta) + log(1 + e^beta)) / 2
// is smallest at beta = 0, so the fit stops at the largest T allowed.
TEST(Calibration, FitOfABalancedPairGoesToTheLargestT) {
  const std::vector<LabelledLogits> s = {{{1.0, 0.0}, 0}, {{1.0, 0.0}, 1}};
  const TemperatureFit f = fit_temperature(s, 0.01, 100);
  EXPECT_TRUE(f.at_bound);
  EXPECT_EQ(f.temperature, 100);
}

// Logits (1, 0): 3 questions labelled 0, 1 labelled 1. The NLL minimum has
// sigmoid(beta) = 3/4, so beta = ln 3 and T = 1 / ln 3.
TEST(Calibration, FitClosedForm) {
  const std::vector<LabelledLogits> s = {
      {{1.0, 0.0}, 0}, {{1.0, 0.0}, 0}, {{1.0, 0.0}, 0}, {{1.0, 0.0}, 1}};
  const TemperatureFit f = fit_temperature(s, 0.01, 100);
  EXPECT_FALSE(f.at_bound);
  EXPECT_NEAR(f.temperature, 1.0 / std::log(3.0), 1e-12);
}

// One-option questions and ties: softmax(z / T) is uniform at every T, so the NLL does not depend
// on T and no bound is "pushed" (the fit says it is not determined).
TEST(Calibration, FlatLogitsLeaveTUndetermined) {
  const std::vector<LabelledLogits> s = {{{0.3}, 0}, {{2.0, 2.0}, 1}, {{-1.0, -1.0, -1.0}, 0}};
  const TemperatureFit f = fit_temperature(s, 0.01, 100);
  EXPECT_FALSE(f.determined);
  EXPECT_FALSE(f.at_bound);
  EXPECT_EQ(f.temperature, 1.0);
  // One sample with distinct logits makes it a fit again.
  std::vector<LabelledLogits> t = s;
  t.push_back({{1.0, 0.0}, 0});
  EXPECT_TRUE(fit_temperature(t, 0.01, 100).determined);
}

std::string refusal(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "accepted";
}

TEST(Labels, LogitsLinesAndRefusals) {
  const auto ok = parse_logits_text(
      "{\"logits\": [0.5, -1, 2], \"label\": 2}\n\n{\"logits\": [1], \"label\": 0}", "l.jsonl");
  ASSERT_EQ(ok.size(), 2u);
  EXPECT_EQ(ok[0].logits, (std::vector<double>{0.5, -1, 2}));
  EXPECT_EQ(ok[0].label, 2u);
  EXPECT_EQ(ok[1].label, 0u);
  auto refused = [](const std::string& line) {
    return refusal(
        [&] { parse_logits_text("{\"logits\": [1, 2], \"label\": 0}\n" + line, "l.jsonl"); });
  };
  EXPECT_NE(
      refused("{\"logits\": [1, 2], \"label\": 2}").find("l.jsonl line 2: \"label\" 2 is not one"),
      std::string::npos);
  EXPECT_NE(
      refused("{\"logits\": [1, 2], \"label\": -1}").find("line 2: \"label\" must be the index"),
      std::string::npos);
  EXPECT_NE(
      refused("{\"logits\": [1, 2], \"label\": 18446744073709551615}").find("is not one of its 2"),
      std::string::npos);
  EXPECT_NE(refused("{\"logits\": [1e999], \"label\": 0}").find("beyond the range of a double"),
            std::string::npos);
  EXPECT_NE(refused("{\"logits\": [NaN], \"label\": 0}").find("line 2: the line is not valid JSON"),
            std::string::npos);
  EXPECT_NE(refused("{\"logits\": [], \"label\": 0}").find("non-empty array"), std::string::npos);
  EXPECT_NE(refused("{\"logits\": [1], \"label\": 0, \"label\": 0}").find("duplicate key"),
            std::string::npos);
}

TEST(Labels, LabelledRequests) {
  const std::string request =
      R"({"state": "s", "questions": {"c": {"type": "choice", "instructions": "i", "criteria": )"
      R"({"a": null, "b": null}}, "n": {"type": "noul", "instructions": "j"}}, "labels": )";
  const auto ok = parse_labels_text(
      request + R"({"c": "b", "n": "yes"}})" + "\n" + request + R"({"c": null}})", "x.jsonl");
  ASSERT_EQ(ok.size(), 2u);
  EXPECT_EQ(ok[0].labels, (std::vector<std::optional<size_t>>{1, 1}));
  EXPECT_EQ(ok[1].labels, (std::vector<std::optional<size_t>>{std::nullopt, std::nullopt}));
  EXPECT_EQ(ok[1].line, 2u);
  EXPECT_NE(refusal([&] {
              parse_labels_text(request + R"({"z": "a"}})", "x.jsonl");
            }).find("x.jsonl line 1: labels.z: no such question"),
            std::string::npos);
  EXPECT_NE(refusal([&] {
              parse_labels_text(request + R"({"c": "q"}})", "x.jsonl");
            }).find("labels.c: \"q\" is not one of the question's options"),
            std::string::npos);
  EXPECT_NE(refusal([&] {
              parse_labels_text(request + R"({"n": 3}})", "x.jsonl");
            }).find("labels.n: a noul label is"),
            std::string::npos);
}

TEST(Bench, LevelSummary) {
  std::vector<BenchOutcome> o = {{200, 10, 5}, {200, 30, 7}, {422, 20, 0}, {0, 40, 0}};
  const LevelSummary s = summarize_level("measured", 4, o, 2.0);
  EXPECT_EQ(s.requests, 4u);
  EXPECT_EQ(s.ok, 2u);
  EXPECT_EQ(s.errors.at(422), 1u);
  EXPECT_EQ(s.errors.at(0), 1u);
  EXPECT_DOUBLE_EQ(s.p50_ms, 25);  // sorted 10 20 30 40, position 1.5
  EXPECT_DOUBLE_EQ(s.mean_ms, 25);
  EXPECT_DOUBLE_EQ(s.requests_per_s, 2);
  EXPECT_DOUBLE_EQ(s.tokens_per_s, 6);  // 12 input tokens of the answered / 2 s
  EXPECT_FALSE(s.ranked);
}

}  // namespace
}  // namespace kev
