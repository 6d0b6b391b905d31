// Labelled inputs of `kev calibrate` (kev/acceptance/labels.h).
#include "kev/acceptance/labels.h"

#include <algorithm>
#include <cmath>

#include "kev/core/error.h"
#include "kev/text/json_lines.h"

namespace kev {
namespace {

constexpr JsonLimits kLabelLimits{
    .max_object_keys = 4096, .max_array_elements = 4096, .max_depth = 64};

// The option index a label names (docs/acceptance.md "Labels").
size_t label_index(const ApiQuestion& q, const OrderedJson& v) {
  const std::string where = "labels." + q.id;
  if (q.type == QuestionType::kNoul) {
    if (v.is_boolean()) return v.get<bool>() ? 1 : 0;
    if (v.is_string() && (v == "yes" || v == "true")) return 1;
    if (v.is_string() && (v == "no" || v == "false")) return 0;
    fail(ErrorKind::kBadInput, "{}: a noul label is true/false or \"yes\"/\"no\", not {}", where,
         v.dump().substr(0, 80));
  }
  if (q.type == QuestionType::kScore && v.is_number_integer()) {
    const bool in_range =
        v.is_number_unsigned()
            ? v.get<uint64_t>() < q.keys.size()
            : v.get<int64_t>() >= 0 && static_cast<uint64_t>(v.get<int64_t>()) < q.keys.size();
    if (!in_range)
      fail(ErrorKind::kBadInput, "{}: level {} is not one of the {} levels (0..{})", where,
           v.dump(), q.keys.size(), q.keys.size() - 1);
    return static_cast<size_t>(v.get<uint64_t>());
  }
  if (v.is_string())
    for (size_t i = 0; i < q.keys.size(); ++i)
      if (q.keys[i] == v.get<std::string>()) return i;
  fail(ErrorKind::kBadInput, "{}: {} is not one of the question's options", where,
       v.dump().substr(0, 80));
}

}  // namespace

std::vector<LabelledLogits> parse_logits_text(std::string_view text, const std::string& name) {
  std::vector<LabelledLogits> out;
  for_each_json_line_in(text, name, kLabelLimits, [&](const OrderedJson& o, size_t) {
    if (!o.is_object()) fail(ErrorKind::kBadInput, "expected {{\"logits\": [...], \"label\": i}}");
    auto z = o.find("logits");
    auto y = o.find("label");
    if (z == o.end() || !z->is_array() || z->empty())
      fail(ErrorKind::kBadInput, "\"logits\" must be a non-empty array of numbers");
    LabelledLogits s;
    for (const auto& v : *z) {
      // The strict reader never yields a non-finite number (1e999 is refused as out of range).
      if (!v.is_number()) fail(ErrorKind::kBadInput, "\"logits\" must hold numbers only");
      s.logits.push_back(v.get<double>());
    }
    if (y == o.end() || !y->is_number_integer() ||
        (!y->is_number_unsigned() && y->get<int64_t>() < 0))
      fail(ErrorKind::kBadInput, "\"label\" must be the index (from 0) of the correct option");
    if (y->get<uint64_t>() >= s.logits.size())
      fail(ErrorKind::kBadInput, "\"label\" {} is not one of its {} options", y->dump(),
           s.logits.size());
    s.label = static_cast<size_t>(y->get<uint64_t>());
    out.push_back(std::move(s));
  });
  return out;
}

std::vector<LabelledRequest> parse_labels_text(std::string_view text, const std::string& name) {
  std::vector<LabelledRequest> out;
  for_each_json_line_in(text, name, kLabelLimits, [&](const OrderedJson& line, size_t number) {
    if (!line.is_object()) fail(ErrorKind::kBadInput, "a labelled request must be a JSON object");
    auto labels = line.find("labels");
    if (labels == line.end() || !labels->is_object())
      fail(ErrorKind::kBadInput, "\"labels\" must be an object of question id -> correct answer");
    LabelledRequest r{number, request_from_json(line), {}};
    for (auto it = labels->begin(); it != labels->end(); ++it) {
      const bool known = std::any_of(r.request.questions.begin(), r.request.questions.end(),
                                     [&](const ApiQuestion& q) { return q.id == it.key(); });
      if (!known)
        fail(ErrorKind::kBadInput, "labels.{}: no such question in the request",
             it.key().substr(0, 80));
    }
    for (const ApiQuestion& q : r.request.questions) {
      auto v = labels->find(q.id);
      if (v == labels->end() || v->is_null()) {
        r.labels.push_back(std::nullopt);
      } else {
        r.labels.push_back(label_index(q, *v));
      }
    }
    out.push_back(std::move(r));
  });
  return out;
}

}  // namespace kev
