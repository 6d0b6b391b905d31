// JSON Lines input files (kev bench's requests, kev calibrate's labels and logits): each
// non-blank line is one strict JSON value (json_strict.h). for_each_json_line_in does the same
// on text already in memory (`path` names it in messages; the fuzz targets use it).
//
// Contract: for_each_json_line reads `path` whole (Error(kIo) naming it), parses every line that
// is not blank under `limits` and calls f(value, line_number) in file order (numbers from 1). A
// line that does not parse, or an Error(kBadInput) thrown by f, becomes Error(kBadInput)
// "<path> line <n>: <why>"; other errors from f pass through unchanged. Blank lines (spaces,
// tabs, CR) are skipped; no trailing newline is needed.
#pragma once
#include <string>
#include <string_view>
#include <utility>

#include "kev/core/error.h"
#include "kev/core/file.h"
#include "kev/core/json_strict.h"

namespace kev {

template <typename F>
void for_each_json_line_in(std::string_view text, const std::string& path, const JsonLimits& limits,
                           F&& f) {
  size_t at = 0, line = 0;
  while (at < text.size()) {
    size_t end = text.find('\n', at);
    if (end == std::string_view::npos) end = text.size();
    const std::string_view s = text.substr(at, end - at);
    at = end + 1;
    ++line;
    if (s.find_first_not_of(" \t\r") == std::string_view::npos) continue;
    OrderedJson value;
    try {
      value = parse_json_strict(s, "the line", limits);
    } catch (const Error& e) {
      fail(ErrorKind::kBadInput, "{} line {}: {}", path, line, e.what());
    }
    try {
      f(value, line);
    } catch (const Error& e) {
      if (e.kind() != ErrorKind::kBadInput) throw;
      fail(ErrorKind::kBadInput, "{} line {}: {}", path, line, e.what());
    }
  }
}

template <typename F>
void for_each_json_line(const std::string& path, const JsonLimits& limits, F&& f) {
  const std::string text = read_file(path);
  for_each_json_line_in(std::string_view(text), path, limits, std::forward<F>(f));
}

}  // namespace kev
