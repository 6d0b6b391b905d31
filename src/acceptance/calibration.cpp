#include "kev/acceptance/calibration.h"

#include <algorithm>
#include <cmath>

#include "kev/core/error.h"

namespace kev {
namespace {

// softmax(beta * z) into p; returns log-sum-exp(beta * z).
double softmax(const std::vector<double>& z, double beta, std::vector<double>& p) {
  const double m = *std::max_element(z.begin(), z.end()) * beta;
  double s = 0;
  p.resize(z.size());
  for (size_t i = 0; i < z.size(); ++i) {
    p[i] = std::exp(beta * z[i] - m);
    s += p[i];
  }
  for (double& x : p) x /= s;
  return m + std::log(s);
}

void check_temperature(double t) {
  if (!std::isfinite(t) || !(t > 0))
    fail(ErrorKind::kBadInput, "the temperature must be a finite number > 0, got {}", t);
}

// d nll / d beta and d^2 nll / d beta^2 at beta.
void derivatives(std::span<const LabelledLogits> samples, double beta, double* g, double* h) {
  std::vector<double> p;
  double sg = 0, sh = 0;
  for (const LabelledLogits& s : samples) {
    softmax(s.logits, beta, p);
    double mean = 0, sq = 0;
    for (size_t i = 0; i < p.size(); ++i) {
      mean += p[i] * s.logits[i];
      sq += p[i] * s.logits[i] * s.logits[i];
    }
    sg += mean - s.logits[s.label];
    sh += std::max(0.0, sq - mean * mean);
  }
  *g = sg / static_cast<double>(samples.size());
  *h = sh / static_cast<double>(samples.size());
}

}  // namespace

void check_samples(std::span<const LabelledLogits> samples) {
  if (samples.empty()) fail(ErrorKind::kBadInput, "no labelled question to calibrate on");
  for (size_t n = 0; n < samples.size(); ++n) {
    const LabelledLogits& s = samples[n];
    if (s.logits.empty()) fail(ErrorKind::kBadInput, "sample {}: no logits", n + 1);
    for (double z : s.logits)
      if (!std::isfinite(z)) fail(ErrorKind::kBadInput, "sample {}: a logit is not finite", n + 1);
    if (s.label >= s.logits.size())
      fail(ErrorKind::kBadInput, "sample {}: label {} is not one of its {} options", n + 1, s.label,
           s.logits.size());
  }
}

CalibrationMetrics calibration_metrics(std::span<const LabelledLogits> samples, double temperature,
                                       size_t bins) {
  check_samples(samples);
  check_temperature(temperature);
  if (bins < 1) fail(ErrorKind::kBadInput, "the reliability diagram needs at least 1 bin");
  CalibrationMetrics m;
  m.temperature = temperature;
  m.samples = samples.size();
  m.bins.resize(bins);
  std::vector<double> conf_sum(bins, 0.0), right(bins, 0.0);
  const double beta = 1.0 / temperature;
  std::vector<double> p;
  for (const LabelledLogits& s : samples) {
    const double lse = softmax(s.logits, beta, p);
    const size_t top = static_cast<size_t>(std::max_element(p.begin(), p.end()) - p.begin());
    const double conf = p[top];
    const double ok = top == s.label ? 1.0 : 0.0;
    m.accuracy += ok;
    m.mean_confidence += conf;
    m.nll += lse - beta * s.logits[s.label];
    for (size_t i = 0; i < p.size(); ++i) {
      const double e = p[i] - (i == s.label ? 1.0 : 0.0);
      m.brier += e * e;
    }
    const size_t b =
        std::min(static_cast<size_t>(std::floor(conf * static_cast<double>(bins))), bins - 1);
    ++m.bins[b].count;
    conf_sum[b] += conf;
    right[b] += ok;
  }
  const double n = static_cast<double>(samples.size());
  m.accuracy /= n;
  m.mean_confidence /= n;
  m.nll /= n;
  m.brier /= n;
  for (size_t b = 0; b < bins; ++b) {
    ReliabilityBin& r = m.bins[b];
    r.lo = static_cast<double>(b) / static_cast<double>(bins);
    r.hi = static_cast<double>(b + 1) / static_cast<double>(bins);
    if (r.count == 0) continue;
    r.mean_confidence = conf_sum[b] / static_cast<double>(r.count);
    r.accuracy = right[b] / static_cast<double>(r.count);
    m.ece += static_cast<double>(r.count) / n * std::fabs(r.accuracy - r.mean_confidence);
  }
  return m;
}

TemperatureFit fit_temperature(std::span<const LabelledLogits> samples, double t_min,
                               double t_max) {
  check_samples(samples);
  check_temperature(t_min);
  check_temperature(t_max);
  if (!(t_min < t_max)) fail(ErrorKind::kBadInput, "the temperature range is empty");
  TemperatureFit fit;
  const bool flat = std::all_of(samples.begin(), samples.end(), [](const LabelledLogits& s) {
    return std::all_of(s.logits.begin(), s.logits.end(),
                       [&](double z) { return z == s.logits.front(); });
  });
  if (flat) {  // softmax(z / T) is uniform at every T: nothing to fit
    fit.temperature = 1.0;
    fit.determined = false;
    return fit;
  }
  double lo = 1.0 / t_max, hi = 1.0 / t_min, g = 0, h = 0;
  derivatives(samples, lo, &g, &h);
  if (g >= 0) {  // nll grows with beta everywhere: the smallest beta (largest T)
    fit.temperature = t_max;
    fit.at_bound = true;
    return fit;
  }
  derivatives(samples, hi, &g, &h);
  if (g <= 0) {
    fit.temperature = t_min;
    fit.at_bound = true;
    return fit;
  }
  double beta = std::clamp(1.0, lo, hi);
  for (fit.iterations = 1; fit.iterations <= 200; ++fit.iterations) {
    derivatives(samples, beta, &g, &h);
    if (std::fabs(g) <= 1e-12) break;
    if (g > 0)
      hi = beta;
    else
      lo = beta;
    if (hi - lo <= 1e-15 * hi) break;
    double next = h > 0 ? beta - g / h : lo;
    if (!(next > lo && next < hi)) next = 0.5 * (lo + hi);
    beta = next;
  }
  fit.temperature = 1.0 / beta;
  return fit;
}

std::string reliability_svg(const CalibrationMetrics& before, const CalibrationMetrics& after) {
  constexpr double kLeft = 60, kTop = 40, kSize = 400;
  auto x = [&](double v) { return kLeft + v * kSize; };
  auto y = [&](double v) { return kTop + (1.0 - v) * kSize; };
  std::string s = fmt::format(
      "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{0}\" height=\"{1}\" "
      "font-family=\"sans-serif\" font-size=\"12\">\n"
      "<title>Reliability diagram</title>\n"
      "<rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n"
      "<text x=\"{2}\" y=\"24\" font-size=\"14\">Reliability: accuracy against confidence (max "
      "probability), {3} questions</text>\n",
      kLeft + kSize + 220, kTop + kSize + 60, kLeft, before.samples);
  for (int i = 0; i <= 10; ++i) {
    const double v = i / 10.0;
    s += fmt::format(
        "<line x1=\"{0:.1f}\" y1=\"{1:.1f}\" x2=\"{0:.1f}\" y2=\"{2:.1f}\" stroke=\"#eee\"/>"
        "<line x1=\"{3:.1f}\" y1=\"{4:.1f}\" x2=\"{5:.1f}\" y2=\"{4:.1f}\" stroke=\"#eee\"/>"
        "<text x=\"{0:.1f}\" y=\"{6:.1f}\" text-anchor=\"middle\">{7:.1f}</text>"
        "<text x=\"{8:.1f}\" y=\"{9:.1f}\" text-anchor=\"end\">{7:.1f}</text>\n",
        x(v), y(0), y(1), x(0), y(v), x(1), y(0) + 16, v, x(0) - 6, y(v) + 4);
  }
  s += fmt::format(
      "<rect x=\"{0}\" y=\"{1}\" width=\"{2}\" height=\"{2}\" fill=\"none\" stroke=\"#444\"/>\n"
      "<line x1=\"{3:.1f}\" y1=\"{4:.1f}\" x2=\"{5:.1f}\" y2=\"{6:.1f}\" stroke=\"#999\" "
      "stroke-dasharray=\"4 4\"/>\n"
      "<text x=\"{7:.1f}\" y=\"{8:.1f}\" text-anchor=\"middle\">confidence (mean max "
      "probability of the bin)</text>\n"
      "<text x=\"16\" y=\"{9:.1f}\" transform=\"rotate(-90 16 {9:.1f})\" "
      "text-anchor=\"middle\">accuracy of the bin</text>\n",
      kLeft, kTop, kSize, x(0), y(0), x(1), y(1), x(0.5), y(0) + 36, y(0.5));
  const struct {
    const CalibrationMetrics* m;
    const char* colour;
    const char* name;
  } series[] = {{&before, "#d62728", "before"}, {&after, "#1f77b4", "after"}};
  int row = 0;
  for (const auto& [m, colour, name] : series) {
    std::string points;
    for (const ReliabilityBin& b : m->bins) {
      if (b.count == 0) continue;
      points += fmt::format("{:.1f},{:.1f} ", x(b.mean_confidence), y(b.accuracy));
      s += fmt::format(
          "<circle cx=\"{:.1f}\" cy=\"{:.1f}\" r=\"{:.1f}\" fill=\"{}\" fill-opacity=\"0.6\">"
          "<title>{} [{:.1f}, {:.1f}): {} questions, confidence {:.3f}, accuracy "
          "{:.3f}</title></circle>\n",
          x(b.mean_confidence), y(b.accuracy),
          3.0 + 6.0 * std::sqrt(static_cast<double>(b.count) / static_cast<double>(m->samples)),
          colour, name, b.lo, b.hi, b.count, b.mean_confidence, b.accuracy);
    }
    s += fmt::format("<polyline points=\"{}\" fill=\"none\" stroke=\"{}\" stroke-width=\"2\"/>\n",
                     points, colour);
    const double ly = kTop + 20 + 48.0 * row++;
    s += fmt::format(
        "<rect x=\"{0:.1f}\" y=\"{1:.1f}\" width=\"12\" height=\"12\" fill=\"{2}\"/>"
        "<text x=\"{3:.1f}\" y=\"{4:.1f}\">{5}: T = {6:.4g}</text>"
        "<text x=\"{3:.1f}\" y=\"{7:.1f}\">ECE {8:.4f}, NLL {9:.4f}</text>\n",
        x(1) + 16, ly - 10, colour, x(1) + 34, ly, name, m->temperature, ly + 16, m->ece, m->nll);
  }
  s += "</svg>\n";
  return s;
}

}  // namespace kev
