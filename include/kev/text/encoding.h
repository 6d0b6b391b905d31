// Kev record encoding: a state and questions -> token ids, positions and readout indices.
//
// Layout (upstream Kev `encode`): [<state> state...] then per question k (1-based)
//   [<q> instr... (<opt> option... </opt>)* <decide>]
// - Delimiters are looked up by token content (text/delimiters.h).
// - User text is escaped (`<|name|>` -> `<¦name¦>`, name = [A-Za-z0-9_]+) and then tokenized
//   as the reference does (added tokens that survive the escape, e.g. `<think>`, still match:
//   the reference tokenizer always matches added tokens; see docs in encoding.cpp). Parts are
//   tokenized separately and concatenated with no separator tokens.
// - Positions: state 0..S-1; every branch restarts at S.
// - Limits: max_state counts <state>; max_row counts S + branch. Strict mode refuses an
//   over-long state with Error(kBadInput) in Kev 1.0's words (`state is 70,000 tokens, over the
//   65,536-token limit (the <state> token included): shorten the document or split it across
//   requests`, plus 1.0's server hint `; or start the server with KEV_TRUNCATE_STATES=1 ...`
//   when truncate_hint); truncating mode keeps <state> + the first max_state-1 state tokens and
//   reports it. A row over max_row is always refused: `branch too long: N tokens with a
//   S-token state (row limit R)` (1.0's encode).
#pragma once
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "kev/text/delimiters.h"
#include "kev/text/tokenizer.h"

namespace kev {

// The delimiters' ids in `tok`; Error(kBadInput) naming a missing token.
Delimiters delimiters_of(const Tokenizer& tok);

struct RecordQuestion {
  std::string instructions;
  std::vector<std::string> options;
};

struct Record {
  std::string state;
  std::vector<RecordQuestion> questions;
};

struct EncodeLimits {
  int64_t max_state = 65536;       // upstream serving default (the <state> token included)
  int64_t max_row = 73728;         // upstream serving default: state + one branch
  bool truncate = false;           // false: strict (refuse an over-long state)
  bool match_added_tokens = true;  // reference behaviour; false: user text is plain text
  bool truncate_hint = false;      // the state refusal names KEV_TRUNCATE_STATES (1.0's server)
};

// n with a comma every three digits (Python's f"{n:,}").
std::string with_thousands(uint64_t n);

// One question as its own causal row: the state ids followed by the branch ids.
struct EncodedRow {
  std::vector<int32_t> branch_ids;  // the branch only: <q> ... <decide>
  size_t decide = 0;                // index of <decide> in the full row (state + branch)
  std::vector<size_t> options;      // index of every </opt> in the full row
};

struct Encoding {
  std::vector<int32_t> ids;                       // packed: state then every branch
  std::vector<int32_t> positions;                 // per token
  std::vector<int32_t> segments;                  // 0 state, k for question k (1-based)
  std::vector<size_t> decide_index;               // packed index of each <decide>
  std::vector<std::vector<size_t>> option_index;  // packed index of each </opt>
  size_t state_length = 0;                        // S, tokens used for the state, <state> included
  size_t state_tokens = 0;  // the state's full length, <state> included (> S when truncated)
  bool truncated = false;
  std::vector<EncodedRow> rows;

  std::vector<int32_t> state_ids() const {
    return {ids.begin(), ids.begin() + static_cast<std::ptrdiff_t>(state_length)};
  }
  std::vector<int32_t> row_ids(size_t question) const;  // state ids + that question's branch
};

std::string escape_user_text(std::string_view text);
std::vector<int32_t> user_tokens(const Tokenizer& tok, std::string_view text,
                                 bool match_added_tokens = true);
Encoding encode_record(const Tokenizer& tok, const Delimiters& delims, const Record& record,
                       const EncodeLimits& limits);

}  // namespace kev
