// The request decoder: a request body's bytes to the request it asks for, or to its refusal
// (HTTP status and the {"detail"} sentence). One decoder for `kev serve` (every POST
// /v1/systemone* body) and `kev score` (stdin, or each JSON Lines line), so both refuse and
// accept exactly the same bodies with the same sentences.
//
// Order (a body that fails an earlier step is never seen by a later one):
//   1. JSON syntax (linear, builds nothing): 400 "the request body is not valid JSON (byte N:
//      reason)"; the reason is the parser's, cut to printable ASCII (it never echoes the body).
//   2. strict JSON under DecodeOptions::json (duplicate keys, bounds, depth, UTF-8): 422.
//   3. date facts (upstream KEV_DATE_FACTS), when on: the state gets its day-count facts.
//   4. the API mapping (request_from_json / permute_request_from_json): 422.
// Truncation of an over-long state is not decided here: it is an encoding limit
// (ScorerOptions::limits.truncate), applied when the request is scored.
// Pure functions; thread-safe; bounded by the JSON limits (fuzzed by
// tests/fuzz/fuzz_request_decoder.cpp). Only out-of-memory escapes as an exception.
#pragma once
#include <string>
#include <string_view>
#include <variant>

#include "kev/core/error.h"
#include "kev/text/api.h"

namespace kev {

struct DecodeOptions {
  JsonLimits json;          // the server's --max-json-* bounds
  bool date_facts = false;  // upstream KEV_DATE_FACTS (with_date_facts on the state)
};

struct Refusal {
  int status = 422;                       // 400 (not JSON), else http_status(kind)
  std::string detail;                     // the {"detail"} sentence
  ErrorKind kind = ErrorKind::kBadInput;  // for a command line's exit code
};

template <class Request>
using Decoded = std::variant<Request, Refusal>;

// POST /v1/systemone (and /separate): a request body.
Decoded<ApiRequest> decode_request(std::string_view body, const DecodeOptions& options);
// POST /v1/systemone/permute: {"request": <request>, "n_perm", "seed"}; date facts go to the
// inner request's state.
Decoded<PermuteRequest> decode_permute_request(std::string_view body, const DecodeOptions& options);

// Why a body that is not JSON is not, for its 400 (step 1 above). For a body that is JSON, the
// generic sentence.
std::string json_syntax_error(std::string_view body);

}  // namespace kev
