// `kev compare A B`: per-question drift and argmax flips between two result files (A is the
// reference), a summary, the worst cases, and gates that set the exit code (docs/acceptance.md).
#include <cstdio>
#include <fstream>
#include <iostream>
#include <optional>
#include <string>

#include "cli/command.h"
#include "cli/options.h"
#include "kev/acceptance/compare.h"
#include "kev/core/error.h"
#include "kev/text/api.h"

namespace kev::cli {
namespace {

constexpr int kGateFailed = 1;
// --max-flips: beyond any file's question count (a larger value could never fail).
constexpr uint64_t kMaxFlips = 1000000000;

struct CompareOptions {
  std::string a, b, json;
  std::optional<double> max_drift;
  std::optional<size_t> max_flips;
  std::optional<double> flip_margin;
  size_t worst = 10;
};

struct Gate {
  std::string name;
  double limit;
  double value;
  bool pass;
};

OrderedJson optional_json(const std::optional<double>& v) {
  return v ? OrderedJson(*v) : OrderedJson();
}

int run_compare(const CompareOptions& o) {
  const ResultFile fa = read_result_file(o.a), fb = read_result_file(o.b);
  const CompareReport r = compare_results(fa, fb);

  std::vector<double> dp, conf, score;
  size_t flips = 0, flips_above = 0;
  double worst_flip_margin = 0;
  for (const QuestionDrift& d : r.questions) {
    dp.push_back(d.max_dp);
    if (d.confidence_drift) conf.push_back(*d.confidence_drift);
    if (d.score_drift) score.push_back(*d.score_drift);
    if (d.flip) {
      ++flips;
      worst_flip_margin = std::max(worst_flip_margin, d.margin);
      if (o.flip_margin && d.margin >= *o.flip_margin) ++flips_above;
    }
  }
  auto mean = [](const std::vector<double>& v) {
    double s = 0;
    for (double x : v) s += x;
    return v.empty() ? 0.0 : s / static_cast<double>(v.size());
  };
  const double max_dp = percentile(dp, 100);
  // Decision agreement (argmax equal) and the flips by A's top-two margin, in bands.
  const double agreement = r.questions.empty() ? 1.0
                                               : 1.0 - static_cast<double>(flips) /
                                                           static_cast<double>(r.questions.size());
  static constexpr double kBandEdges[] = {0.005, 0.01, 0.02, 0.05, 0.1};
  struct Band {
    double lo, hi;
    size_t questions = 0, flips = 0;
  };
  std::vector<Band> bands;
  double lo = 0;
  for (double hi : kBandEdges) {
    bands.push_back({lo, hi});
    lo = hi;
  }
  bands.push_back({lo, 2.0});  // margins are at most 1
  for (const QuestionDrift& d : r.questions)
    for (Band& b : bands)
      if (d.margin >= b.lo && d.margin < b.hi) {
        ++b.questions;
        b.flips += d.flip ? 1 : 0;
        break;
      }

  std::vector<Gate> gates;
  if (o.max_drift)
    gates.push_back({"max-probability-drift", *o.max_drift, max_dp, max_dp <= *o.max_drift});
  if (o.max_flips)
    gates.push_back({"max-flips", static_cast<double>(*o.max_flips), static_cast<double>(flips),
                     flips <= *o.max_flips});
  if (o.flip_margin)
    gates.push_back({"max-flips-above-margin", *o.flip_margin, static_cast<double>(flips_above),
                     flips_above == 0});
  if (!gates.empty())  // a gate cannot pass on answers that one side does not have
    gates.push_back({"answered-on-both-sides", 0, static_cast<double>(r.one_sided.size()),
                     r.one_sided.empty()});
  bool pass = true;
  for (const Gate& g : gates) pass = pass && g.pass;

  std::printf("reference A: %s\ncandidate B: %s\n", fa.name.c_str(), fb.name.c_str());
  std::printf(
      "records: %zu matched by %s, %zu answered on both sides, %zu errors on both, %zu "
      "answered on one side only\n",
      r.records, r.by_id ? "id" : "line", r.compared, r.errors_both, r.one_sided.size());
  for (const std::string& s : r.one_sided) std::printf("  one-sided: %s\n", s.c_str());
  std::printf("questions compared: %zu\n", r.questions.size());
  std::printf("max |dp| per question: p50 %.6g  p90 %.6g  p99 %.6g  max %.6g  mean %.6g\n",
              percentile(dp, 50), percentile(dp, 90), percentile(dp, 99), max_dp, mean(dp));
  std::printf("argmax flips: %zu (largest reference margin among them: %.6g)\n", flips,
              worst_flip_margin);
  std::printf("decision agreement: %.4f (argmax equal on %zu of %zu)\n", agreement,
              r.questions.size() - flips, r.questions.size());
  std::printf("flips by reference margin:");
  for (const Band& b : bands)
    if (b.hi > 1)
      std::printf("  >= %g: %zu of %zu\n", b.lo, b.flips, b.questions);
    else
      std::printf("  [%g, %g): %zu of %zu", b.lo, b.hi, b.flips, b.questions);
  if (!conf.empty())
    std::printf("confidence drift: mean %.6g  max %.6g (%zu questions)\n", mean(conf),
                percentile(conf, 100), conf.size());
  if (!score.empty())
    std::printf("score drift: mean %.6g  max %.6g (%zu score questions)\n", mean(score),
                percentile(score, 100), score.size());

  // Worst cases: flips first (largest reference margin first), then the largest max |dp|.
  std::vector<const QuestionDrift*> order;
  for (const QuestionDrift& d : r.questions) order.push_back(&d);
  std::stable_sort(order.begin(), order.end(), [](const QuestionDrift* x, const QuestionDrift* y) {
    if (x->flip != y->flip) return x->flip;
    if (x->flip) return x->margin > y->margin;
    return x->max_dp > y->max_dp;
  });
  const size_t shown = std::min(o.worst, order.size());
  if (shown) {
    std::printf("worst %zu:\n  %-24s %-16s %-7s %10s %10s  %s\n", shown, "record", "question",
                "type", "max|dp|", "margin A", "argmax A -> B");
    for (size_t i = 0; i < shown; ++i) {
      const QuestionDrift& d = *order[i];
      std::printf("  %-24s %-16s %-7s %10.6f %10.6f  %s -> %s%s\n", d.record.c_str(),
                  d.question.c_str(), d.type.c_str(), d.max_dp, d.margin, d.argmax_a.c_str(),
                  d.argmax_b.c_str(), d.flip ? "  FLIP" : "");
    }
  }
  for (const Gate& g : gates)
    std::printf("gate %s %.6g: %s (%.6g)\n", g.name.c_str(), g.limit, g.pass ? "pass" : "FAIL",
                g.value);
  if (!gates.empty()) std::printf("%s\n", pass ? "PASS" : "FAIL");

  if (!o.json.empty()) {
    OrderedJson band_json = OrderedJson::array();
    for (const Band& b : bands)
      band_json.push_back({{"margin_from", b.lo},
                           {"margin_below", b.hi > 1 ? OrderedJson() : OrderedJson(b.hi)},
                           {"questions", b.questions},
                           {"flips", b.flips}});
    OrderedJson qs = OrderedJson::array();
    for (const QuestionDrift& d : r.questions)
      qs.push_back({{"record", d.record},
                    {"question", d.question},
                    {"type", d.type},
                    {"max_dp", d.max_dp},
                    {"argmax_a", d.argmax_a},
                    {"argmax_b", d.argmax_b},
                    {"margin", d.margin},
                    {"flip", d.flip},
                    {"confidence_drift", optional_json(d.confidence_drift)},
                    {"score_drift", optional_json(d.score_drift)}});
    OrderedJson gs = OrderedJson::array();
    for (const Gate& g : gates)
      gs.push_back({{"gate", g.name}, {"limit", g.limit}, {"value", g.value}, {"pass", g.pass}});
    OrderedJson report = {
        {"a", fa.name},
        {"b", fb.name},
        {"matched_by", r.by_id ? "id" : "line"},
        {"records", r.records},
        {"compared", r.compared},
        {"errors_both", r.errors_both},
        {"one_sided", r.one_sided},
        {"summary",
         {{"questions", r.questions.size()},
          {"max_dp",
           {{"p50", percentile(dp, 50)},
            {"p90", percentile(dp, 90)},
            {"p99", percentile(dp, 99)},
            {"max", max_dp},
            {"mean", mean(dp)}}},
          {"flips", flips},
          {"largest_flip_margin", worst_flip_margin},
          {"agreement", agreement},
          {"flips_by_margin", band_json},
          {"confidence_drift_questions", conf.size()},
          {"confidence_drift_mean", conf.empty() ? OrderedJson() : OrderedJson(mean(conf))},
          {"confidence_drift_max",
           conf.empty() ? OrderedJson() : OrderedJson(percentile(conf, 100))},
          {"score_drift_questions", score.size()},
          {"score_drift_mean", score.empty() ? OrderedJson() : OrderedJson(mean(score))},
          {"score_drift_max",
           score.empty() ? OrderedJson() : OrderedJson(percentile(score, 100))}}},
        {"questions", std::move(qs)},
        {"gates", std::move(gs)},
        {"pass", pass}};
    std::ofstream out(o.json, std::ios::binary | std::ios::trunc);
    out << report.dump(1) << "\n";
    out.close();
    if (!out) fail(ErrorKind::kIo, "{}: cannot write the report", o.json);
  }
  return pass ? 0 : kGateFailed;
}

const bool compare_registered = register_command(
    "compare",
    "per-question probability drift and argmax flips between two result files, with gates",
    [](CLI::App& app) {
      auto o = std::make_shared<CompareOptions>();
      app.footer(
          "Result files: JSON Lines of System One responses (kev score --jsonl, kev bench, or "
          "bodies saved from any System One server), matched by \"id\"/\"request_id\" when every "
          "record has one, else line by line. Exit status: 0 every gate passed (or none given), "
          "1 a gate failed, 2 malformed or mismatched files, 4 a file could not be read. See "
          "docs/acceptance.md.");
      app.add_option("A", o->a, "reference result file")->check(path())->required();
      app.add_option("B", o->b, "candidate result file")->check(path())->required();
      app.add_option(
             "--max-probability-drift", o->max_drift,
             "gate: fail (exit 1) if any option's |p_B - p_A| exceeds this (below 1: a drift "
             "is at most 1, so 1 could never fail)")
          ->check(number(0, Bound::kClosed, 1, Bound::kOpen));
      app.add_option("--max-flips", o->max_flips,
                     "gate: fail (exit 1) if more than this many questions change their argmax")
          ->check(whole(0, kMaxFlips));
      app.add_option("--max-flips-above-margin", o->flip_margin,
                     "gate: fail (exit 1) if any question whose reference top-two margin is at "
                     "least this changes its argmax (README: 0.02; a margin is at most 1)")
          ->check(number(0, Bound::kClosed, 1, Bound::kClosed));
      app.add_option("--worst", o->worst, "worst questions to list")
          ->check(whole(0, 1000000))
          ->capture_default_str();
      app.add_option("--json", o->json, "also write the full report (every question) as JSON")
          ->check(path());
      return [o] { return run_compare(*o); };
    });

}  // namespace
}  // namespace kev::cli
