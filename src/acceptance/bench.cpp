#include "kev/acceptance/bench.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>

#include "kev/acceptance/compare.h"

namespace kev {

LevelSummary summarize_level(std::string phase, size_t concurrency,
                             const std::vector<BenchOutcome>& outcomes, double wall_s) {
  LevelSummary s;
  s.phase = std::move(phase);
  s.concurrency = concurrency;
  s.requests = outcomes.size();
  s.wall_s = wall_s;
  size_t tokens = 0;
  double sum = 0;
  for (const BenchOutcome& o : outcomes) {
    s.latencies_ms.push_back(o.latency_ms);
    sum += o.latency_ms;
    if (o.status == 200) {
      ++s.ok;
      tokens += o.input_tokens;
    } else {
      ++s.errors[o.status];
    }
  }
  s.p50_ms = percentile(s.latencies_ms, 50);
  s.p95_ms = percentile(s.latencies_ms, 95);
  s.p99_ms = percentile(s.latencies_ms, 99);
  s.max_ms = percentile(s.latencies_ms, 100);
  s.mean_ms = outcomes.empty() ? 0 : sum / static_cast<double>(outcomes.size());
  if (wall_s > 0) {
    s.requests_per_s = static_cast<double>(s.requests) / wall_s;
    s.tokens_per_s = static_cast<double>(tokens) / wall_s;
  }
  s.ranked = s.requests > 0 && s.ok == s.requests;
  return s;
}

std::string latency_svg(const std::vector<LevelSummary>& levels, const std::string& title) {
  constexpr double kLeft = 70, kTop = 40, kWidth = 560, kHeight = 320;
  double top = 0;
  for (const LevelSummary& l : levels) top = std::max(top, l.max_ms);
  // A round axis end: 1, 2 or 5 times a power of ten.
  double step = std::pow(10.0, std::floor(std::log10(std::max(top, 1e-3))));
  double end = step;
  for (double m : {1.0, 2.0, 5.0, 10.0})
    if (m * step >= top) {
      end = m * step;
      break;
    }
  auto x = [&](double ms) { return kLeft + ms / end * kWidth; };
  auto y = [&](double f) { return kTop + (1.0 - f) * kHeight; };
  std::string s = fmt::format(
      "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{0}\" height=\"{1}\" "
      "font-family=\"sans-serif\" font-size=\"12\">\n<title>{2}</title>\n"
      "<rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n"
      "<text x=\"{3}\" y=\"24\" font-size=\"14\">{2}</text>\n",
      kLeft + kWidth + 280, kTop + kHeight + 60, title, kLeft);
  for (int i = 0; i <= 10; ++i) {
    const double f = i / 10.0, ms = end * f;
    s += fmt::format(
        "<line x1=\"{0:.1f}\" y1=\"{1:.1f}\" x2=\"{0:.1f}\" y2=\"{2:.1f}\" stroke=\"#eee\"/>"
        "<line x1=\"{3:.1f}\" y1=\"{4:.1f}\" x2=\"{5:.1f}\" y2=\"{4:.1f}\" stroke=\"#eee\"/>"
        "<text x=\"{0:.1f}\" y=\"{6:.1f}\" text-anchor=\"middle\">{7:.4g}</text>"
        "<text x=\"{8:.1f}\" y=\"{9:.1f}\" text-anchor=\"end\">{10:.1f}</text>\n",
        x(ms), y(0), y(1), x(0), y(f), x(end), y(0) + 16, ms, x(0) - 6, y(f) + 4, f);
  }
  s += fmt::format(
      "<rect x=\"{0}\" y=\"{1}\" width=\"{2}\" height=\"{3}\" fill=\"none\" stroke=\"#444\"/>\n"
      "<text x=\"{4:.1f}\" y=\"{5:.1f}\" text-anchor=\"middle\">latency (ms)</text>\n"
      "<text x=\"16\" y=\"{6:.1f}\" transform=\"rotate(-90 16 {6:.1f})\" "
      "text-anchor=\"middle\">fraction of requests answered within</text>\n",
      kLeft, kTop, kWidth, kHeight, x(end / 2), y(0) + 36, y(0.5));
  static const char* kColours[] = {"#1f77b4", "#ff7f0e", "#2ca02c", "#d62728",
                                   "#9467bd", "#8c564b", "#e377c2", "#7f7f7f"};
  for (size_t i = 0; i < levels.size(); ++i) {
    const LevelSummary& l = levels[i];
    const char* colour = kColours[i % 8];
    std::vector<double> v = l.latencies_ms;
    std::sort(v.begin(), v.end());
    std::string points = fmt::format("{:.1f},{:.1f} ", x(0), y(0));
    for (size_t k = 0; k < v.size(); ++k) {
      const double before = static_cast<double>(k) / static_cast<double>(v.size());
      const double after = static_cast<double>(k + 1) / static_cast<double>(v.size());
      points += fmt::format("{:.1f},{:.1f} {:.1f},{:.1f} ", x(v[k]), y(before), x(v[k]), y(after));
    }
    s += fmt::format("<polyline points=\"{}\" fill=\"none\" stroke=\"{}\" stroke-width=\"2\"/>\n",
                     points, colour);
    const double ly = kTop + 16 + 40.0 * static_cast<double>(i);
    s += fmt::format(
        "<rect x=\"{0:.1f}\" y=\"{1:.1f}\" width=\"12\" height=\"12\" fill=\"{2}\"/>"
        "<text x=\"{3:.1f}\" y=\"{4:.1f}\">{5} c={6}: {7} requests{8}</text>"
        "<text x=\"{3:.1f}\" y=\"{9:.1f}\">p50 {10:.1f} ms, p95 {11:.1f} ms</text>\n",
        x(end) + 16, ly - 10, colour, x(end) + 34, ly, l.phase, l.concurrency, l.requests,
        l.ranked ? "" : " (errors)", ly + 16, l.p50_ms, l.p95_ms);
  }
  s += "</svg>\n";
  return s;
}

}  // namespace kev
