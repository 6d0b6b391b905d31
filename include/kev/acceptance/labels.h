// Labelled inputs of `kev calibrate` (docs/acceptance.md "Calibration"): the --logits form and
// the --labels form, read from JSON Lines text.
//
// Contract. --logits: each non-blank line {"logits": [K >= 1 numbers], "label": i} with 0 <= i <
// K (at most 4096 logits a line); parse_logits_text returns them in file order. --labels: each
// line a /v1/systemone request plus "labels": {question id: answer}, the answer a choice's
// option key, a score's level index or key, or a noul's true/false / "yes"/"no" (null or absent:
// unlabelled); parse_labels_text returns the decoded request and, per question in request
// order, the option index of its label or nullopt. A label naming no question or no option, and
// anything else malformed, is refused with Error(kBadInput) "<name> line <n>: <field>: why";
// neither parser crashes on arbitrary bytes (tests/fuzz/fuzz_labels.cpp).
#pragma once
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "kev/acceptance/calibration.h"
#include "kev/text/api.h"

namespace kev {

struct LabelledRequest {
  size_t line = 0;  // 1-based line in the file
  ApiRequest request;
  std::vector<std::optional<size_t>> labels;  // per question of `request`
};

std::vector<LabelledLogits> parse_logits_text(std::string_view text, const std::string& name);
std::vector<LabelledRequest> parse_labels_text(std::string_view text, const std::string& name);

}  // namespace kev
