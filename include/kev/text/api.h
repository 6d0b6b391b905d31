// The System1-Omni / Kev request and answer mapping (docs/reference.md section 8).
//
// Contract:
// - parse_request(json text): Error(kBadInput) for malformed JSON or invalid semantics (the
//   server maps both kinds to its own statuses: it checks JSON syntax itself first, so every
//   kBadInput from here on a well-formed body is a 422). Rules: body is an object; `state` is
//   required (any JSON value, null allowed); `model` optional string (default "kev-latest");
//   `questions` an object with >= 1 entry; each question an object with `type` choice | noul |
//   score, `instructions` any JSON (missing = null); choice `criteria` an object of 1..255
//   entries; noul `criteria` an object or null (only "false"/"true" read); score `criteria` an
//   array of 1..255 levels. Duplicate keys in any JSON object are refused, and so is JSON
//   nested deeper than kMaxJsonDepth.
// - render(): object/array/scalar -> text exactly as the upstream `render` (Python str() of
//   scalars: True/False, shortest-repr floats; `key: value` lines, `- item`, two-space indent).
// - Options in caller order: choice `name` or `name: render(desc)`; noul ["no[: desc]",
//   "yes[: desc]"]; score render(level).
// - answers_json(): per question, from its option probabilities p (in option order), exactly as
//   Kev 1.0's to_answers: choice {"type","choice" (first argmax of p),"confidence",
//   "probabilities" {name: p}}; noul {"type","noul": p(yes)}; score {"type","score" sum i*p_i,
//   "legend" {"i": text}, "probabilities" {"i": p}, "confidence"}. Confidences normalise first
//   (n = p / sum(p), uniform when the sum is 0): choice (max n - 1/K) / (1 - 1/K); score
//   max(0, 1 - sum n_i |i - mode| / D), mode the first argmax of n, D = sum |i - (L-1)/2| / L;
//   both 1 for one option. Every sum is python_sum(); values rounded to `decimals` (Python
//   round(x, n); default 4 as 1.0; negative: unrounded): python_compat.h.
#pragma once
#include <cstdint>
#include <nlohmann/json.hpp>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "kev/core/json_strict.h"
#include "kev/text/encoding.h"
#include "kev/text/question_limits.h"

namespace kev {

enum class QuestionType { kChoice, kNoul, kScore };

struct ApiQuestion {
  std::string id;
  QuestionType type = QuestionType::kChoice;
  std::string instructions;          // rendered
  std::vector<std::string> options;  // rendered option texts, in order
  std::vector<std::string> keys;     // probability keys: names / "false","true" / "0".."L-1"
};

struct ApiRequest {
  std::string model;
  std::string state;  // rendered
  std::vector<ApiQuestion> questions;
};

ApiRequest parse_request(std::string_view json_text, const JsonLimits& limits = {});
ApiRequest request_from_json(const OrderedJson& body);
std::string render(const OrderedJson& value, int indent = 0);
// Kev 1.0's confidences and expected score of one question's probabilities (the header contract).
double choice_confidence(const std::vector<double>& p);
double score_confidence(const std::vector<double>& p);
double expected_score(const std::vector<double>& p);
Record to_record(const ApiRequest& request);
const char* type_name(QuestionType t);

// POST /v1/systemone/permute (upstream kev/serve.py PermuteSystemOne): {"request": a
// /v1/systemone request (validated whole), "question": the id of one of its choice questions,
// "n_perm": orders to score, 1..kMaxPermutations (default 6), "seed": an integer (default 0;
// Python's random.Random seeds with its absolute value)}. Other keys are ignored, as pydantic
// does. Integral floats (6.0) are taken for the integers; strings and booleans are refused.
inline constexpr int kMaxPermutations = 64;
struct PermuteRequest {
  ApiRequest request;
  std::string question;
  size_t question_index = 0;  // in request.questions
  int n_perm = 6;
  uint64_t seed = 0;  // |seed|
};
PermuteRequest permute_request_from_json(const OrderedJson& body);

struct AnswerOptions {
  int decimals = 4;
};
// probabilities[q] holds question q's option probabilities in option order.
OrderedJson answers_json(const ApiRequest& request,
                         const std::vector<std::vector<double>>& probabilities,
                         const AnswerOptions& options = {});

}  // namespace kev
