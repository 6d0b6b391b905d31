// Rules confirmed against Kev 1.0's kev/api.py (docs/api.md names the revisions): render(),
// option_text(), question_keys(), to_record(), _normalize(), choice_confidence(),
// score_confidence(), round_prob(), to_answers(); sums as CPython >= 3.12's sum() of floats.
// Deliberately different (docs/api.md): integers beyond 64 bits render as floats (Python keeps
// them exact); duplicate JSON keys are refused (Python keeps the last one).
#include "kev/text/api.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <optional>
#include <set>
#include <unordered_set>

#include "kev/core/error.h"
#include "kev/text/python_compat.h"
#include "kev/text/utf8.h"

namespace kev {
namespace {

std::string python_lstrip(const std::string& s) {
  size_t i = 0;
  while (i < s.size()) {
    size_t j = i;
    if (!is_python_space(next_code_point(s, j))) break;
    i = j;
  }
  return s.substr(i);
}

std::string scalar_text(const OrderedJson& v) {
  if (v.is_string()) return v.get<std::string>();
  if (v.is_boolean()) return v.get<bool>() ? "True" : "False";
  if (v.is_number_integer()) {
    return v.is_number_unsigned() ? std::to_string(v.get<uint64_t>())
                                  : std::to_string(v.get<int64_t>());
  }
  return python_float_repr(v.get<double>());
}

bool is_container(const OrderedJson& v) {
  return v.is_object() || v.is_array();
}

std::string option_text(const std::string& name, const OrderedJson* desc) {
  if (!desc || desc->is_null() ||
      (desc->is_string() && desc->get_ref<const std::string&>().empty())) {
    return name;
  }
  return name + ": " + render(*desc);
}

[[noreturn]] void bad(const std::string& msg) {
  throw Error(ErrorKind::kBadInput, msg);
}

// A choice question's criteria (an object of options) or a score question's (an array of
// levels): present, of that kind, with 1..kMaxOptions entries.
void check_option_list(const OrderedJson* c, const std::string& id, QuestionType type) {
  const bool levels = type == QuestionType::kScore;
  if (!c) bad(fmt::format("questions.{}.criteria: field required", id));
  if (levels ? !c->is_array() : !c->is_object())
    bad(fmt::format("questions.{}.criteria: a {} question takes {}", id,
                    levels ? "score" : "choice", levels ? "an array of levels" : "an object"));
  if (c->empty() || c->size() > kMaxOptions)
    bad(fmt::format("questions.{}.criteria: must have 1..{} {}, not {}", id, kMaxOptions,
                    levels ? "levels" : "options", c->size()));
}

}  // namespace

std::string render(const OrderedJson& v, int indent) {
  std::string pad(static_cast<size_t>(indent) * 2, ' ');
  if (v.is_null()) return "";
  if (!is_container(v)) return scalar_text(v);
  std::string out;
  bool first = true;
  if (v.is_array()) {
    for (const auto& x : v) {
      if (!first) out += '\n';
      first = false;
      out += pad + "- " + python_lstrip(render(x, indent + 1));
    }
    return out;
  }
  for (auto it = v.begin(); it != v.end(); ++it) {
    if (!first) out += '\n';
    first = false;
    if (is_container(it.value())) {
      out += pad + it.key() + ":\n" + render(it.value(), indent + 1);
    } else {
      out += pad + it.key() + ": " + render(it.value());
    }
  }
  return out;
}

const char* type_name(QuestionType t) {
  switch (t) {
    case QuestionType::kChoice:
      return "choice";
    case QuestionType::kNoul:
      return "noul";
    case QuestionType::kScore:
      return "score";
  }
  return "?";
}

ApiRequest parse_request(std::string_view json_text, const JsonLimits& limits) {
  return request_from_json(parse_json_strict(json_text, "the request body", limits));
}

ApiRequest request_from_json(const OrderedJson& body) {
  if (!body.is_object()) bad("the request must be a JSON object");
  ApiRequest r;
  if (!body.contains("state")) bad("state: field required");
  r.model = "kev-latest";
  if (auto it = body.find("model"); it != body.end()) {
    if (!it->is_string()) bad("model: must be a string");
    r.model = it->get<std::string>();
  }
  auto qs = body.find("questions");
  if (qs == body.end()) bad("questions: field required");
  if (!qs->is_object()) bad("questions: must be an object of question id -> question");
  if (qs->empty()) bad("questions: at least one question is required");
  for (auto it = qs->begin(); it != qs->end(); ++it) {
    const std::string& id = it.key();
    const OrderedJson& q = it.value();
    if (!q.is_object()) bad(fmt::format("questions.{}: must be an object", id));
    auto t = q.find("type");
    if (t == q.end() || !t->is_string()) {
      bad(fmt::format("questions.{}.type: must be one of 'choice', 'noul', 'score'", id));
    }
    ApiQuestion out;
    out.id = id;
    const std::string& type = t->get_ref<const std::string&>();
    if (auto in = q.find("instructions"); in != q.end()) out.instructions = render(*in);
    auto crit = q.find("criteria");
    const OrderedJson* c = crit == q.end() ? nullptr : &*crit;
    if (type == "noul") {
      out.type = QuestionType::kNoul;
      if (c && !c->is_null() && !c->is_object()) {
        bad(fmt::format("questions.{}.criteria: a noul question takes an object or null", id));
      }
      const OrderedJson* no = nullptr;
      const OrderedJson* yes = nullptr;
      if (c && c->is_object()) {
        if (auto f = c->find("false"); f != c->end()) no = &*f;
        if (auto f = c->find("true"); f != c->end()) yes = &*f;
      }
      out.options = {option_text("no", no), option_text("yes", yes)};
      out.keys = {"false", "true"};
    } else if (type == "choice") {
      out.type = QuestionType::kChoice;
      check_option_list(c, id, out.type);
      for (auto o = c->begin(); o != c->end(); ++o) {
        out.options.push_back(option_text(o.key(), &o.value()));
        out.keys.push_back(o.key());
      }
    } else if (type == "score") {
      out.type = QuestionType::kScore;
      check_option_list(c, id, out.type);
      for (size_t i = 0; i < c->size(); ++i) {
        out.options.push_back(render((*c)[i]));
        out.keys.push_back(std::to_string(i));
      }
    } else {
      bad(fmt::format("questions.{}.type: must be one of 'choice', 'noul', 'score', not '{}'", id,
                      type));
    }
    r.questions.push_back(std::move(out));
  }
  r.state = render(body["state"]);
  return r;
}

namespace {

// A JSON integer, or a float with an integral value (pydantic's lax int); nullopt otherwise.
std::optional<double> integral(const OrderedJson& v) {
  if (v.is_number_integer() || v.is_number_unsigned()) return v.get<double>();
  if (v.is_number_float()) {
    const double d = v.get<double>();
    if (std::isfinite(d) && d == std::floor(d)) return d;
  }
  return std::nullopt;
}

}  // namespace

PermuteRequest permute_request_from_json(const OrderedJson& body) {
  if (!body.is_object()) bad("the request must be a JSON object");
  PermuteRequest p;
  auto req = body.find("request");
  if (req == body.end()) bad("request: field required");
  try {
    p.request = request_from_json(*req);
  } catch (const Error& e) {
    bad(fmt::format("request: {}", e.what()));
  }
  auto q = body.find("question");
  if (q == body.end()) bad("question: field required");
  if (!q->is_string()) bad("question: must be a string");
  p.question = q->get<std::string>();
  if (auto n = body.find("n_perm"); n != body.end()) {
    auto v = integral(*n);
    if (!v) bad("n_perm: must be an integer");
    if (*v < 1 || *v > kMaxPermutations)
      bad(fmt::format("n_perm: must be between 1 and {}", kMaxPermutations));
    p.n_perm = static_cast<int>(*v);
  }
  if (auto s = body.find("seed"); s != body.end()) {
    if (s->is_number_unsigned()) {
      p.seed = s->get<uint64_t>();
    } else if (s->is_number_integer()) {
      const int64_t v = s->get<int64_t>();
      p.seed = v < 0 ? static_cast<uint64_t>(-(v + 1)) + 1 : static_cast<uint64_t>(v);
    } else {
      auto v = integral(*s);
      if (!v || std::fabs(*v) >= 18446744073709551616.0)
        bad("seed: must be an integer of at most 64 bits");
      p.seed = static_cast<uint64_t>(std::fabs(*v));
    }
  }
  const auto& qs = p.request.questions;
  auto it =
      std::find_if(qs.begin(), qs.end(), [&](const ApiQuestion& x) { return x.id == p.question; });
  if (it == qs.end() || it->type != QuestionType::kChoice)
    bad("question must be an existing choice question");
  p.question_index = static_cast<size_t>(it - qs.begin());
  return p;
}

Record to_record(const ApiRequest& request) {
  Record rec;
  rec.state = request.state;
  for (const ApiQuestion& q : request.questions)
    rec.questions.push_back({q.instructions, q.options});
  return rec;
}

namespace {

// The first index of the largest value (Python's max(range(n), key=p.__getitem__)).
size_t first_max(const std::vector<double>& p) {
  size_t best = 0;
  for (size_t i = 1; i < p.size(); ++i) {
    if (p[i] > p[best]) best = i;
  }
  return best;
}

// 1.0's _normalize: p / sum(p), or uniform 1/len when the sum is 0.
std::vector<double> normalized(const std::vector<double>& p) {
  const double t = python_sum(p);
  const double k = static_cast<double>(p.size());
  std::vector<double> n(p.size());
  for (size_t i = 0; i < p.size(); ++i) n[i] = t == 0 ? 1.0 / k : p[i] / t;
  return n;
}

// Python's max(0.0, x): 0.0 unless x > 0.0 (so -0.0 and NaN give 0.0).
double at_least_zero(double x) {
  return x > 0.0 ? x : 0.0;
}

}  // namespace

double choice_confidence(const std::vector<double>& p) {
  if (p.size() == 1) return 1.0;
  const std::vector<double> n = normalized(p);
  const double k = static_cast<double>(p.size());
  return (n[first_max(n)] - 1.0 / k) / (1.0 - 1.0 / k);
}

double score_confidence(const std::vector<double>& p) {
  const size_t l = p.size();
  if (l == 1) return 1.0;
  const std::vector<double> n = normalized(p);
  const size_t mode = first_max(n);
  const double mid = static_cast<double>(l - 1) / 2.0;
  std::vector<double> terms(l);
  for (size_t i = 0; i < l; ++i) terms[i] = std::fabs(static_cast<double>(i) - mid);
  const double d = python_sum(terms) / static_cast<double>(l);
  for (size_t i = 0; i < l; ++i) {
    const size_t dist = i > mode ? i - mode : mode - i;
    terms[i] = n[i] * static_cast<double>(dist);
  }
  return at_least_zero(1.0 - python_sum(terms) / d);
}

double expected_score(const std::vector<double>& p) {
  std::vector<double> terms(p.size());
  for (size_t i = 0; i < p.size(); ++i) terms[i] = static_cast<double>(i) * p[i];
  return python_sum(terms);
}

OrderedJson answers_json(const ApiRequest& request,
                         const std::vector<std::vector<double>>& probabilities,
                         const AnswerOptions& options) {
  if (probabilities.size() != request.questions.size()) {
    fail(ErrorKind::kInternal, "{} probability vectors for {} questions", probabilities.size(),
         request.questions.size());
  }
  auto r = [&](double x) { return python_round(x, options.decimals); };
  OrderedJson answers = OrderedJson::object();
  for (size_t qi = 0; qi < request.questions.size(); ++qi) {
    const ApiQuestion& q = request.questions[qi];
    const std::vector<double>& p = probabilities[qi];
    if (p.size() != q.options.size() || p.empty()) {
      fail(ErrorKind::kInternal, "question {}: {} probabilities for {} options", q.id, p.size(),
           q.options.size());
    }
    OrderedJson a = OrderedJson::object();
    a["type"] = type_name(q.type);
    if (q.type == QuestionType::kNoul) {
      a["noul"] = r(p[1]);
    } else if (q.type == QuestionType::kChoice) {
      a["choice"] = q.keys[first_max(p)];
      a["confidence"] = r(choice_confidence(p));
      OrderedJson dist = OrderedJson::object();
      for (size_t i = 0; i < p.size(); ++i) dist[q.keys[i]] = r(p[i]);
      a["probabilities"] = std::move(dist);
    } else {
      a["score"] = r(expected_score(p));
      OrderedJson legend = OrderedJson::object();
      OrderedJson dist = OrderedJson::object();
      for (size_t i = 0; i < p.size(); ++i) {
        legend[q.keys[i]] = q.options[i];
        dist[q.keys[i]] = r(p[i]);
      }
      a["legend"] = std::move(legend);
      a["probabilities"] = std::move(dist);
      a["confidence"] = r(score_confidence(p));
    }
    answers[q.id] = std::move(a);
  }
  return answers;
}

}  // namespace kev
