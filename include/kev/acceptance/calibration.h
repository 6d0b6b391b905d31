// Temperature calibration of pointer logits: the fit and the figures `kev calibrate` reports
// (docs/acceptance.md "Calibration").
//
// Contract. A sample is one question: its raw pointer logits z (K >= 1 finite values, before any
// temperature) and the index y of the correct option. At temperature T, p = softmax(z / T) in
// float64 (max subtracted). Over N samples:
//   accuracy        = mean [argmax p == y]        (argmax: first largest, as kev answers)
//   mean_confidence = mean max_i p_i              (the top probability, not the API's rescaled
//                                                  "confidence" field)
//   nll             = mean -log p_y               (natural log, computed as log-sum-exp)
//   brier           = mean sum_i (p_i - [i == y])^2   (multi-class, in [0, 2])
//   ece             = sum_b (n_b / N) |acc_b - conf_b| over `bins` equal-width bins of max p,
//                     sample in bin min(floor(max p * bins), bins - 1)
// fit_temperature minimises nll over T in [t_min, t_max]. nll is convex in beta = 1/T, so the
// minimum is where d nll / d beta = mean(E_p[z] - z_y) = 0: found by safeguarded Newton steps
// within a bisection bracket, to |derivative| <= 1e-12 or a bracket of relative width 1e-15.
// When the derivative has one sign over the whole range the fit stops at that bound
// (at_bound = true; e.g. every sample right by a wide margin drives T -> 0). When every sample's
// logits are all equal (one option each, or ties), nll does not depend on T at all: the fit
// returns T = 1 with determined = false and at_bound = false.
// Refusals (Error kBadInput): no sample, an empty or non-finite logit vector, a label out of
// range, a temperature not finite and > 0, bins < 1.
#pragma once
#include <cstddef>
#include <span>
#include <string>
#include <vector>

namespace kev {

struct LabelledLogits {
  std::vector<double> logits;
  size_t label = 0;
};

struct ReliabilityBin {
  double lo = 0, hi = 0;  // [lo, hi) of max p (the last bin includes 1)
  size_t count = 0;
  double mean_confidence = 0, accuracy = 0;  // 0 when count is 0
};

struct CalibrationMetrics {
  double temperature = 1;
  size_t samples = 0;
  double accuracy = 0, mean_confidence = 0, nll = 0, brier = 0, ece = 0;
  std::vector<ReliabilityBin> bins;
};

struct TemperatureFit {
  double temperature = 1;
  bool at_bound = false;
  bool determined = true;  // false: nll is the same at every T (see above)
  int iterations = 0;
};

void check_samples(std::span<const LabelledLogits> samples);
CalibrationMetrics calibration_metrics(std::span<const LabelledLogits> samples, double temperature,
                                       size_t bins = 10);
TemperatureFit fit_temperature(std::span<const LabelledLogits> samples, double t_min = 0.01,
                               double t_max = 100.0);

// A reliability diagram (SVG 1.1, no script): accuracy against mean confidence per non-empty bin
// for `before` and `after`, the diagonal of perfect calibration, and each one's ECE in the legend.
std::string reliability_svg(const CalibrationMetrics& before, const CalibrationMetrics& after);

}  // namespace kev
