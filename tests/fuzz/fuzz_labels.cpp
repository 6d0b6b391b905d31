// Fuzzes the readers of `kev calibrate`'s labelled inputs (kev/acceptance/labels.h) on arbitrary
// bytes: any refusal must be a kev::Error (never a crash, another exception or a hang). Logits
// that parse have a label inside their options and give finite calibration figures at T = 1;
// labelled requests that parse carry one label slot per question, each inside its options.
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string_view>

#include "kev/acceptance/calibration.h"
#include "kev/acceptance/labels.h"
#include "kev/core/error.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  try {
    const std::vector<kev::LabelledLogits> logits = kev::parse_logits_text(text, "fuzz");
    for (const kev::LabelledLogits& s : logits)
      if (s.logits.empty() || s.label >= s.logits.size()) std::abort();
    if (!logits.empty()) {
      const kev::CalibrationMetrics m = kev::calibration_metrics(logits, 1.0);
      if (!std::isfinite(m.nll) || !std::isfinite(m.brier) || !std::isfinite(m.ece)) std::abort();
    }
  } catch (const kev::Error&) {
  }
  try {
    for (const kev::LabelledRequest& r : kev::parse_labels_text(text, "fuzz")) {
      if (r.labels.size() != r.request.questions.size()) std::abort();
      for (size_t q = 0; q < r.labels.size(); ++q)
        if (r.labels[q] && *r.labels[q] >= r.request.questions[q].keys.size()) std::abort();
    }
  } catch (const kev::Error&) {
  }
  return 0;
}
