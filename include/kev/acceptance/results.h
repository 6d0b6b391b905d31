// Result files: what `kev compare` reads (docs/acceptance.md "Result files").
//
// Contract. A result file is JSON Lines (blank lines skipped), one record per line, each a JSON
// object in one of these shapes:
//   - a System One response {"model", "answers": {id: answer}, ...} (`kev score --jsonl` output,
//     or a body saved from any System One server), optionally with "id" / "request_id";
//   - a wrapped response {"id" | "request_id", "status"?, "response": <response or error>};
//   - an error {"detail": ..., "status"?} (what `kev score --jsonl` writes for a refused line).
// A `kev bench` results file is read the same way: its {"kev_bench": ...} metadata and
// {"kev_bench_summary": ...} lines and every record with a "phase" other than "feasibility"
// (the measured passes' repeats) are skipped.
// "id" / "request_id" may be a string or an integer (read as its decimal text). An answer is
// {"type": "choice"|"score", "probabilities": {key: p}} (plus "confidence", and "score" for a
// score answer) or {"type": "noul", "noul": p} (read as keys "no", "yes" with 1-p, p). Every
// probability must be a finite number in [0, 1]; keys keep the file's order.
// Anything else is refused with Error(kBadInput) naming the file, line and field; the parser
// never crashes on arbitrary bytes (tests/fuzz/fuzz_results.cpp).
#pragma once
#include <cstddef>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace kev {

struct ResultAnswer {
  std::string question;           // the answer's id in "answers"
  std::string type;               // choice | score | noul
  std::vector<std::string> keys;  // option keys in the file's order
  std::vector<double> probs;      // same order
  std::optional<double> confidence;
  std::optional<double> score;  // score answers only
};

struct ResultRecord {
  size_t line = 0;                // 1-based line in the file
  std::optional<std::string> id;  // "id" / "request_id" when present
  bool ok = false;                // answered (else an error record)
  int status = 0;                 // the error's HTTP status when given (0: not given)
  std::string detail;             // the error's "detail"
  std::vector<ResultAnswer> answers;
};

struct ResultFile {
  std::string name;  // for messages
  std::vector<ResultRecord> records;
};

// Parses a whole result file's text; `name` is used in messages.
ResultFile parse_result_file(std::string_view text, const std::string& name);
// Reads and parses a file (Error kIo if it cannot be read; kBadInput if it holds no record).
ResultFile read_result_file(const std::string& path);

}  // namespace kev
