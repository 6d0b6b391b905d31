// Fuzzes the result-file parser of `kev compare` / `kev bench` (kev/acceptance/results.h) on
// arbitrary bytes: any refusal must be a kev::Error (never a crash, another exception or a
// hang), and a file that parses must compare with itself to zero drift, no flip and every
// record paired.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string_view>

#include "kev/acceptance/compare.h"
#include "kev/acceptance/results.h"
#include "kev/core/error.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  kev::ResultFile f;
  try {
    f = kev::parse_result_file(text, "fuzz");
  } catch (const kev::Error&) {
    return 0;
  }
  try {
    const kev::CompareReport r = kev::compare_results(f, f);
    if (r.records != f.records.size() || !r.one_sided.empty()) std::abort();
    for (const kev::QuestionDrift& d : r.questions)
      if (d.max_dp != 0 || d.flip) std::abort();
  } catch (const kev::Error&) {
    // Duplicate ids are refused even against the same file.
  }
  return 0;
}
