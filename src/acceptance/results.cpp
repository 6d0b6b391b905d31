#include "kev/acceptance/results.h"

#include <cmath>

#include "kev/core/error.h"
#include "kev/core/file.h"
#include "kev/text/api.h"

namespace kev {
namespace {

// Results are small documents; these bounds keep a hostile file from costing more than its size.
constexpr JsonLimits kResultLimits{
    .max_object_keys = 4096, .max_array_elements = 4096, .max_depth = 32};

struct Where {
  const std::string& name;
  size_t line;
};

[[noreturn]] void bad(const Where& w, std::string_view what) {
  fail(ErrorKind::kBadInput, "{} line {}: {}", w.name, w.line, what);
}

double probability(const Where& w, const OrderedJson& v, const std::string& field) {
  if (!v.is_number()) bad(w, fmt::format("{} must be a number", field));
  const double p = v.get<double>();
  if (!std::isfinite(p) || p < 0.0 || p > 1.0)
    bad(w, fmt::format("{} must be a probability in [0, 1], got {}", field, v.dump()));
  return p;
}

std::optional<double> optional_number(const Where& w, const OrderedJson& a, const char* key,
                                      const std::string& field) {
  auto it = a.find(key);
  if (it == a.end() || it->is_null()) return std::nullopt;
  if (!it->is_number() || !std::isfinite(it->get<double>()))
    bad(w, fmt::format("{}.{} must be a finite number", field, key));
  return it->get<double>();
}

ResultAnswer parse_answer(const Where& w, const std::string& id, const OrderedJson& a) {
  const std::string field = "answers." + id;
  if (!a.is_object()) bad(w, fmt::format("{} must be an object", field));
  ResultAnswer out;
  out.question = id;
  auto t = a.find("type");
  if (t == a.end() || !t->is_string())
    bad(w, fmt::format("{}.type must be \"choice\", \"score\" or \"noul\"", field));
  out.type = t->get<std::string>();
  if (out.type == "noul") {
    auto p = a.find("noul");
    if (p == a.end()) bad(w, fmt::format("{}.noul is missing", field));
    const double yes = probability(w, *p, field + ".noul");
    out.keys = {"no", "yes"};
    out.probs = {1.0 - yes, yes};
    out.confidence = optional_number(w, a, "confidence", field);
    return out;
  }
  if (out.type != "choice" && out.type != "score")
    bad(w,
        fmt::format("{}.type must be \"choice\", \"score\" or \"noul\", got {}", field, t->dump()));
  auto ps = a.find("probabilities");
  if (ps == a.end() || !ps->is_object() || ps->empty())
    bad(w,
        fmt::format("{}.probabilities must be a non-empty object of option -> probability", field));
  for (auto it = ps->begin(); it != ps->end(); ++it) {
    out.keys.push_back(it.key());
    out.probs.push_back(probability(w, it.value(), field + ".probabilities." + it.key()));
  }
  out.confidence = optional_number(w, a, "confidence", field);
  if (out.type == "score") out.score = optional_number(w, a, "score", field);
  return out;
}

std::optional<std::string> record_id(const Where& w, const OrderedJson& o) {
  for (const char* key : {"id", "request_id"}) {
    auto it = o.find(key);
    if (it == o.end() || it->is_null()) continue;
    if (it->is_string()) return it->get<std::string>();
    if (it->is_number_integer()) return it->dump();
    bad(w, fmt::format("\"{}\" must be a string or an integer", key));
  }
  return std::nullopt;
}

ResultRecord parse_record(const Where& w, const OrderedJson& o) {
  if (!o.is_object()) bad(w, "a record must be a JSON object");
  ResultRecord r;
  r.line = w.line;
  r.id = record_id(w, o);
  const OrderedJson* body = &o;
  if (auto it = o.find("response"); it != o.end()) {
    if (!it->is_object()) bad(w, "\"response\" must be an object");
    body = &*it;
    if (auto s = o.find("status"); s != o.end() && s->is_number_integer())
      r.status = static_cast<int>(s->get<int64_t>());
  }
  if (auto a = body->find("answers"); a != body->end()) {
    if (!a->is_object() || a->empty())
      bad(w, "\"answers\" must be a non-empty object of question id -> answer");
    r.ok = true;
    for (auto it = a->begin(); it != a->end(); ++it)
      r.answers.push_back(parse_answer(w, it.key(), it.value()));
    return r;
  }
  if (auto d = body->find("detail"); d != body->end()) {
    r.detail = d->is_string() ? d->get<std::string>() : d->dump();
    if (auto s = body->find("status"); s != body->end() && s->is_number_integer())
      r.status = static_cast<int>(s->get<int64_t>());
    return r;
  }
  bad(w, "neither a response with \"answers\" nor an error with \"detail\"");
}

}  // namespace

ResultFile parse_result_file(std::string_view text, const std::string& name) {
  ResultFile f;
  f.name = name;
  size_t line = 0, at = 0;
  while (at < text.size()) {
    size_t end = text.find('\n', at);
    if (end == std::string_view::npos) end = text.size();
    const std::string_view s = text.substr(at, end - at);
    at = end + 1;
    ++line;
    if (s.find_first_not_of(" \t\r") == std::string_view::npos) continue;
    const Where w{name, line};
    OrderedJson o;
    try {
      o = parse_json_strict(s, "the line", kResultLimits);
    } catch (const Error& e) {
      bad(w, e.what());
    }
    // kev bench results: its metadata and summary lines, and the measured passes' repeats (the
    // feasibility pass holds each request's answer once).
    if (o.is_object()) {
      if (o.contains("kev_bench") || o.contains("kev_bench_summary")) continue;
      if (auto ph = o.find("phase"); ph != o.end() && *ph != "feasibility") continue;
    }
    f.records.push_back(parse_record(w, o));
  }
  return f;
}

ResultFile read_result_file(const std::string& path) {
  ResultFile f = parse_result_file(read_file(path), path);
  if (f.records.empty())
    fail(ErrorKind::kBadInput, "{}: no result record (expected JSON Lines of System One responses)",
         path);
  return f;
}

}  // namespace kev
