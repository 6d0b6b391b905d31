// `kev calibrate`: fits the calibration temperature on labelled questions by minimising the NLL
// over the raw pointer logits, and reports accuracy, mean confidence, NLL, Brier and ECE before
// and after, with a reliability table (and an SVG diagram with --svg). docs/acceptance.md.
#include <cstdio>
#include <fstream>
#include <iostream>
#include <optional>
#include <string>

#include "cli/command.h"
#include "cli/options.h"
#include "cli/scorer_flags.h"
#include "kev/acceptance/calibration.h"
#include "kev/acceptance/labels.h"
#include "kev/core/error.h"
#include "kev/core/file.h"
#include "kev/score/scorer.h"
#include "kev/text/api.h"

namespace kev::cli {
namespace {

struct CalibrateOptions {
  std::string bundle, labels, logits, svg, json, dump_logits;
  std::optional<double> temperature;
  double t_min = 0.01, t_max = 100;
  size_t bins = 10;
  ScorerOptions scorer;
};

std::vector<LabelledLogits> read_logits(const std::string& path) {
  return parse_logits_text(read_file(path), path);
}

// --bundle + --labels: every line is read and checked before the bundle scores the first one.
std::vector<LabelledLogits> score_labelled(const CalibrateOptions& o, double* bundle_t) {
  const std::vector<LabelledRequest> labelled = parse_labels_text(read_file(o.labels), o.labels);
  Scorer scorer(o.bundle, o.scorer);
  *bundle_t = scorer.head().temperature();
  std::vector<LabelledLogits> out;
  size_t unlabelled = 0;
  for (const LabelledRequest& l : labelled) {
    ScoreResult r;
    try {
      r = scorer.score(l.request);
    } catch (const Error& e) {
      if (e.kind() != ErrorKind::kBadInput) throw;
      fail(ErrorKind::kBadInput, "{} line {}: {}", o.labels, l.line, e.what());
    }
    for (size_t q = 0; q < l.request.questions.size(); ++q) {
      if (!l.labels[q]) {
        ++unlabelled;
        continue;
      }
      LabelledLogits s;
      s.logits.assign(r.logits[q].begin(), r.logits[q].end());
      s.label = *l.labels[q];
      out.push_back(std::move(s));
    }
  }
  if (unlabelled) std::fprintf(stderr, "kev calibrate: %zu questions had no label\n", unlabelled);
  return out;
}

OrderedJson metrics_json(const CalibrationMetrics& m) {
  OrderedJson bins = OrderedJson::array();
  for (const ReliabilityBin& b : m.bins)
    bins.push_back({{"lo", b.lo},
                    {"hi", b.hi},
                    {"count", b.count},
                    {"mean_confidence", b.mean_confidence},
                    {"accuracy", b.accuracy}});
  return {{"temperature", m.temperature},
          {"accuracy", m.accuracy},
          {"mean_confidence", m.mean_confidence},
          {"nll", m.nll},
          {"brier", m.brier},
          {"ece", m.ece},
          {"bins", std::move(bins)}};
}

void write_text(const std::string& path, const std::string& text) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out << text;
  out.close();
  if (!out) fail(ErrorKind::kIo, "{}: cannot write", path);
}

int run_calibrate(const CalibrateOptions& o) {
  if (o.logits.empty() == o.bundle.empty())
    fail(ErrorKind::kBadInput, "give either --bundle with --labels, or --logits");
  if (!o.bundle.empty() && o.labels.empty())
    fail(ErrorKind::kBadInput, "--bundle needs --labels (labelled requests, JSON Lines)");
  if (o.bundle.empty() && !o.labels.empty())
    fail(ErrorKind::kBadInput, "--labels needs --bundle (to score the labelled requests)");
  if (!(o.t_min < o.t_max))
    fail(ErrorKind::kBadInput, "--min-temperature {} must be below --max-temperature {}", o.t_min,
         o.t_max);
  double source_t = 1.0;
  std::vector<LabelledLogits> samples =
      o.bundle.empty() ? read_logits(o.logits) : score_labelled(o, &source_t);
  if (samples.empty())
    fail(ErrorKind::kBadInput, "{}: no labelled question", o.bundle.empty() ? o.logits : o.labels);
  if (!o.dump_logits.empty()) {
    std::string text;
    for (const LabelledLogits& s : samples)
      text += OrderedJson{{"logits", s.logits}, {"label", s.label}}.dump() + "\n";
    write_text(o.dump_logits, text);
  }
  const double before_t = o.temperature.value_or(source_t);
  const CalibrationMetrics before = calibration_metrics(samples, before_t, o.bins);
  const TemperatureFit fit = fit_temperature(samples, o.t_min, o.t_max);
  const CalibrationMetrics after = calibration_metrics(samples, fit.temperature, o.bins);

  std::printf("calibration on %zu labelled questions\n", samples.size());
  std::printf("%-18s %14s %14s\n", "", fmt::format("before T={:.4g}", before_t).c_str(),
              fmt::format("after T={:.4g}", fit.temperature).c_str());
  const struct {
    const char* name;
    double a, b;
  } rows[] = {{"accuracy", before.accuracy, after.accuracy},
              {"mean confidence", before.mean_confidence, after.mean_confidence},
              {"NLL", before.nll, after.nll},
              {"Brier", before.brier, after.brier},
              {"ECE", before.ece, after.ece}};
  for (const auto& r : rows) std::printf("%-18s %14.6f %14.6f\n", r.name, r.a, r.b);
  if (fit.determined)
    std::printf("fitted temperature: %.6g (NLL minimised over T in [%g, %g]%s)\n", fit.temperature,
                o.t_min, o.t_max, fit.at_bound ? "; AT THE BOUND: the data push T further" : "");
  else
    std::printf(
        "fitted temperature: none: the NLL does not depend on T on these questions (each has "
        "one option, or options with equal logits); 'after' is shown at T=1\n");
  std::printf("reliability (bins of the top probability):\n  %-11s %6s %8s %8s | %6s %8s %8s\n",
              "bin", "n", "conf", "acc", "n", "conf", "acc");
  for (size_t b = 0; b < before.bins.size(); ++b) {
    const ReliabilityBin &x = before.bins[b], &y = after.bins[b];
    std::printf("  [%.2f,%.2f%c %6zu %8.4f %8.4f | %6zu %8.4f %8.4f\n", x.lo, x.hi,
                b + 1 == before.bins.size() ? ']' : ')', x.count, x.mean_confidence, x.accuracy,
                y.count, y.mean_confidence, y.accuracy);
  }
  if (fit.determined)
    std::printf("to serve with it: KEV_TEMPERATURE=%.6g kev serve ... (or --temperature)\n",
                fit.temperature);
  if (!o.svg.empty()) write_text(o.svg, reliability_svg(before, after));
  if (!o.json.empty())
    write_text(o.json, OrderedJson{{"samples", samples.size()},
                                   {"fit",
                                    {{"temperature", fit.temperature},
                                     {"at_bound", fit.at_bound},
                                     {"determined", fit.determined},
                                     {"iterations", fit.iterations},
                                     {"range", {o.t_min, o.t_max}}}},
                                   {"before", metrics_json(before)},
                                   {"after", metrics_json(after)}}
                               .dump(1) +
                           "\n");
  return 0;
}

const bool calibrate_registered = register_command(
    "calibrate",
    "fit the calibration temperature on labelled questions; accuracy, NLL, Brier, ECE before and "
    "after",
    [](CLI::App& app) {
      auto o = std::make_shared<CalibrateOptions>();
      app.footer(
          "Labels: each line of --labels is a /v1/systemone request plus \"labels\": {question "
          "id: correct option key (choice), level index or key (score), true/false or "
          "\"yes\"/\"no\" (noul)}. --logits takes {\"logits\": [raw pointer logits], \"label\": "
          "index} per line instead (logits computed elsewhere; --dump-logits writes this form). "
          "See docs/acceptance.md.");
      app.add_option("--bundle", o->bundle, "export bundle to score the labelled requests with")
          ->check(path());
      app.add_option("--labels", o->labels, "labelled requests (JSON Lines)")->check(path());
      app.add_option("--logits", o->logits, "raw logits with labels (JSON Lines), no bundle")
          ->check(path());
      app.add_option("--temperature", o->temperature,
                     "the 'before' temperature (default: the bundle's; 1.0 with --logits)")
          ->check(number(0, Bound::kOpen, kMaxTemperature, Bound::kClosed));
      app.add_option("--min-temperature", o->t_min, "lowest temperature the fit may choose")
          ->check(number(0, Bound::kOpen, kMaxTemperature, Bound::kClosed))
          ->capture_default_str();
      app.add_option("--max-temperature", o->t_max, "highest temperature the fit may choose")
          ->check(number(0, Bound::kOpen, kMaxTemperature, Bound::kClosed))
          ->capture_default_str();
      app.add_option("--bins", o->bins, "reliability bins (equal width over the top probability)")
          ->check(whole(1, 1000))
          ->capture_default_str();
      app.add_option("--svg", o->svg, "write the reliability diagram (before and after) as SVG")
          ->check(path());
      app.add_option("--json", o->json, "write the figures and every bin as JSON")->check(path());
      app.add_option("--dump-logits", o->dump_logits,
                     "write the labelled raw logits (the --logits form)")
          ->check(path());
      app.add_option("--threads", o->scorer.forward.threads, "compute threads (default: all cores)")
          ->check(whole(0, kMaxThreads));
      add_precision_flag(app, o->scorer.forward.precision);
      return [o] { return run_calibrate(*o); };
    });

}  // namespace
}  // namespace kev::cli
