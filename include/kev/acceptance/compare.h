// Paired comparison of two result files (results.h): the figures `kev compare` prints and gates.
//
// Contract. Records are matched by id when every record of both files has one (ids unique in
// each file, the same set in both), otherwise by position (both files the same number of
// records). Matched records answered on both sides must hold the same question ids, each of
// the same type with the same option keys (order free); anything else is refused with
// Error(kBadInput) and one sentence naming both files, the record and the question. A record
// that is an error on either side is not compared; one answered on only one side is listed in
// `one_sided`.
// Per question, with A the reference and probabilities p (A) and q (B) over A's option order:
//   max_dp     = max_i |p_i - q_i|
//   argmax     = first index of the largest probability (ties go to the earlier option)
//   margin     = p_(1) - p_(2), A's top-two gap (1 for a single option)
//   flip       = argmax(p) != argmax(q)
//   confidence_drift = |conf_B - conf_A| when both answers carry "confidence"
//   score_drift      = |score_B - score_A| for score answers carrying "score"
#pragma once
#include <optional>
#include <string>
#include <vector>

#include "kev/acceptance/results.h"

namespace kev {

struct QuestionDrift {
  std::string record;  // id, or "line N" (A's line) when matched by position
  std::string question;
  std::string type;
  double max_dp = 0;
  std::string argmax_a, argmax_b;  // option keys
  double margin = 0;
  bool flip = false;
  std::optional<double> confidence_drift, score_drift;
};

struct CompareReport {
  bool by_id = false;
  size_t records = 0;                    // matched pairs
  size_t compared = 0;                   // pairs answered on both sides
  size_t errors_both = 0;                // pairs that are errors on both sides
  std::vector<std::string> one_sided;    // "<record>: answered in A only" / "... B only"
  std::vector<QuestionDrift> questions;  // record order, then A's question order
};

CompareReport compare_results(const ResultFile& a, const ResultFile& b);

// numpy.percentile's default (linear interpolation between closest ranks); values need not be
// sorted; q in [0, 100]; empty -> 0.
double percentile(std::vector<double> values, double q);

}  // namespace kev
