#include "kev/acceptance/compare.h"

#include <algorithm>
#include <cmath>
#include <map>

#include "kev/core/error.h"

namespace kev {
namespace {

size_t argmax(const std::vector<double>& p) {
  size_t best = 0;
  for (size_t i = 1; i < p.size(); ++i)
    if (p[i] > p[best]) best = i;
  return best;
}

double top_two_margin(const std::vector<double>& p) {
  if (p.size() < 2) return 1.0;
  std::vector<double> s = p;
  std::partial_sort(s.begin(), s.begin() + 2, s.end(), std::greater<>());
  return s[0] - s[1];
}

std::string label(const ResultRecord& r) {
  return r.id ? *r.id : fmt::format("line {}", r.line);
}

void compare_pair(const ResultFile& fa, const ResultRecord& a, const ResultFile& fb,
                  const ResultRecord& b, CompareReport& out) {
  const std::string rec = label(a);
  auto refuse = [&](const std::string& what) {
    fail(ErrorKind::kBadInput, "{} (line {}) and {} (line {}) do not answer the same questions: {}",
         fa.name, a.line, fb.name, b.line, what);
  };
  if (a.answers.size() != b.answers.size())
    refuse(fmt::format("record {} has {} answers in one and {} in the other", rec, a.answers.size(),
                       b.answers.size()));
  std::map<std::string, const ResultAnswer*> in_b;
  for (const ResultAnswer& x : b.answers) in_b[x.question] = &x;
  for (const ResultAnswer& x : a.answers) {
    auto it = in_b.find(x.question);
    if (it == in_b.end())
      refuse(fmt::format("record {}: question \"{}\" is missing from the second file", rec,
                         x.question));
    const ResultAnswer& y = *it->second;
    if (x.type != y.type)
      refuse(
          fmt::format("record {}: question \"{}\" is a {} answer in one and a {} answer in "
                      "the other",
                      rec, x.question, x.type, y.type));
    if (x.keys.size() != y.keys.size())
      refuse(fmt::format("record {}: question \"{}\" has {} options in one and {} in the other",
                         rec, x.question, x.keys.size(), y.keys.size()));
    // B's probabilities in A's option order.
    std::vector<double> q(x.keys.size());
    for (size_t i = 0; i < x.keys.size(); ++i) {
      auto k = std::find(y.keys.begin(), y.keys.end(), x.keys[i]);
      if (k == y.keys.end())
        refuse(fmt::format("record {}: question \"{}\" has option \"{}\" only in the first file",
                           rec, x.question, x.keys[i]));
      q[i] = y.probs[static_cast<size_t>(k - y.keys.begin())];
    }
    QuestionDrift d;
    d.record = rec;
    d.question = x.question;
    d.type = x.type;
    for (size_t i = 0; i < q.size(); ++i)
      d.max_dp = std::max(d.max_dp, std::fabs(x.probs[i] - q[i]));
    const size_t ia = argmax(x.probs), ib = argmax(q);
    d.argmax_a = x.keys[ia];
    d.argmax_b = x.keys[ib];
    d.flip = ia != ib;
    d.margin = top_two_margin(x.probs);
    if (x.confidence && y.confidence) d.confidence_drift = std::fabs(*y.confidence - *x.confidence);
    if (x.score && y.score) d.score_drift = std::fabs(*y.score - *x.score);
    out.questions.push_back(std::move(d));
  }
}

}  // namespace

CompareReport compare_results(const ResultFile& a, const ResultFile& b) {
  CompareReport out;
  auto all_ids = [](const ResultFile& f) {
    return std::all_of(f.records.begin(), f.records.end(),
                       [](const ResultRecord& r) { return r.id.has_value(); });
  };
  std::vector<std::pair<const ResultRecord*, const ResultRecord*>> pairs;
  out.by_id = all_ids(a) && all_ids(b);
  if (out.by_id) {
    auto index = [](const ResultFile& f) {
      std::map<std::string, const ResultRecord*> m;
      for (const ResultRecord& r : f.records)
        if (!m.emplace(*r.id, &r).second)
          fail(ErrorKind::kBadInput, "{} line {}: id \"{}\" appears twice (ids must be unique)",
               f.name, r.line, *r.id);
      return m;
    };
    const auto ia = index(a), ib = index(b);
    for (const ResultRecord& r : a.records) {
      auto it = ib.find(*r.id);
      if (it == ib.end())
        fail(ErrorKind::kBadInput, "id \"{}\" ({} line {}) is not in {}", *r.id, a.name, r.line,
             b.name);
      pairs.emplace_back(&r, it->second);
    }
    for (const ResultRecord& r : b.records)
      if (!ia.count(*r.id))
        fail(ErrorKind::kBadInput, "id \"{}\" ({} line {}) is not in {}", *r.id, b.name, r.line,
             a.name);
  } else {
    if (a.records.size() != b.records.size())
      fail(ErrorKind::kBadInput,
           "{} has {} records and {} has {}: files without an id on every record are matched "
           "line by line and must hold the same number",
           a.name, a.records.size(), b.name, b.records.size());
    for (size_t i = 0; i < a.records.size(); ++i) pairs.emplace_back(&a.records[i], &b.records[i]);
  }
  for (auto [ra, rb] : pairs) {
    ++out.records;
    if (ra->ok && rb->ok) {
      ++out.compared;
      compare_pair(a, *ra, b, *rb, out);
    } else if (!ra->ok && !rb->ok) {
      ++out.errors_both;
    } else {
      out.one_sided.push_back(fmt::format("{}: answered in {} only, error in the other ({})",
                                          label(*ra), ra->ok ? a.name : b.name,
                                          ra->ok ? rb->detail : ra->detail));
    }
  }
  return out;
}

double percentile(std::vector<double> v, double q) {
  if (v.empty()) return 0.0;
  std::sort(v.begin(), v.end());
  const double pos = q / 100.0 * static_cast<double>(v.size() - 1);
  const size_t lo = static_cast<size_t>(std::floor(pos));
  const size_t hi = std::min(lo + 1, v.size() - 1);
  const double frac = pos - static_cast<double>(lo);
  return v[lo] + (v[hi] - v[lo]) * frac;
}

}  // namespace kev
