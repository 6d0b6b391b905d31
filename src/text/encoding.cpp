// Rules confirmed against the upstream Kev source (encoding: kev/encoding.py, kev/model.py):
// - user_tokens rewrites <|name|> to <¦name¦> and calls the tokenizer with
//   add_special_tokens=False. In the reference tokenizer library that flag only controls the
//   post-processor; added tokens written in the text (those the escape leaves, like <think>)
//   are still matched. We do the same by default (EncodeLimits::match_added_tokens).
// - S = [<state>] + state_tokens[:max_state-1]; strict refuses len(state_tokens)+1 > max_state.
// - A branch is refused when len(branch) > max_row - len(S) (after any truncation).
// - Instruction, option and state texts are tokenized separately; no separators are added.
#include "kev/text/encoding.h"

#include <fmt/format.h>

#include "kev/core/error.h"

namespace kev {
namespace {

int32_t delimiter(const Tokenizer& tok, std::string_view content) {
  auto id = tok.token_id(content);
  if (!id) {
    fail(ErrorKind::kBadInput, "the tokenizer has no {} token, which Kev uses as a delimiter",
         content);
  }
  return *id;
}

bool is_name_char(char c) {
  return (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '_';
}

}  // namespace

Delimiters delimiters_of(const Tokenizer& tok) {
  Delimiters d;
  for (const DelimiterToken& t : kDelimiterTokens) d.*t.id = delimiter(tok, t.content);
  return d;
}

std::string escape_user_text(std::string_view text) {
  // Non-overlapping left-to-right matches of <\|([A-Za-z0-9_]+)\|>, as Python's re.sub.
  std::string out;
  out.reserve(text.size());
  size_t i = 0, n = text.size();
  while (i < n) {
    if (text[i] == '<' && i + 1 < n && text[i + 1] == '|') {
      size_t j = i + 2;
      while (j < n && is_name_char(text[j])) ++j;
      if (j > i + 2 && j + 1 < n && text[j] == '|' && text[j + 1] == '>') {
        out += "<\xC2\xA6";
        out.append(text.substr(i + 2, j - i - 2));
        out += "\xC2\xA6>";
        i = j + 2;
        continue;
      }
    }
    out += text[i++];
  }
  return out;
}

std::vector<int32_t> user_tokens(const Tokenizer& tok, std::string_view text,
                                 bool match_added_tokens) {
  return tok.encode(escape_user_text(text), match_added_tokens);
}

std::vector<int32_t> Encoding::row_ids(size_t question) const {
  std::vector<int32_t> r = state_ids();
  const auto& b = rows.at(question).branch_ids;
  r.insert(r.end(), b.begin(), b.end());
  return r;
}

std::string with_thousands(uint64_t n) {
  std::string digits = std::to_string(n), out;
  for (size_t i = 0; i < digits.size(); ++i) {
    if (i > 0 && (digits.size() - i) % 3 == 0) out += ',';
    out += digits[i];
  }
  return out;
}

Encoding encode_record(const Tokenizer& tok, const Delimiters& d, const Record& record,
                       const EncodeLimits& limits) {
  if (limits.max_state < 1 || limits.max_row < 1) {
    fail(ErrorKind::kBadInput, "max_state and max_row must be at least 1");
  }
  Encoding e;
  std::vector<int32_t> state = user_tokens(tok, record.state, limits.match_added_tokens);
  e.state_tokens = state.size() + 1;
  if (static_cast<int64_t>(e.state_tokens) > limits.max_state) {
    if (!limits.truncate) {
      const std::string limit = with_thousands(static_cast<uint64_t>(limits.max_state));
      std::string msg = fmt::format(
          "state is {} tokens, over the {}-token limit (the <state> token included): shorten "
          "the document or split it across requests",
          with_thousands(e.state_tokens), limit);
      if (limits.truncate_hint)
        msg += fmt::format(
            "; or start the server with KEV_TRUNCATE_STATES=1 to read only its first {} tokens "
            "(responses then say truncated: true)",
            limit);
      throw Error(ErrorKind::kBadInput, msg);
    }
    state.resize(static_cast<size_t>(limits.max_state - 1));
    e.truncated = true;
  }
  e.ids.push_back(d.state);
  e.ids.insert(e.ids.end(), state.begin(), state.end());
  e.state_length = e.ids.size();
  for (size_t i = 0; i < e.state_length; ++i) e.positions.push_back(static_cast<int32_t>(i));
  e.segments.assign(e.state_length, 0);

  const size_t s = e.state_length;
  for (size_t k = 0; k < record.questions.size(); ++k) {
    const RecordQuestion& q = record.questions[k];
    EncodedRow row;
    std::vector<int32_t>& br = row.branch_ids;
    br.push_back(d.question);
    tok.encode_into(escape_user_text(q.instructions), limits.match_added_tokens, br);
    for (const std::string& option : q.options) {
      br.push_back(d.option_open);
      tok.encode_into(escape_user_text(option), limits.match_added_tokens, br);
      br.push_back(d.option_close);
      row.options.push_back(s + br.size() - 1);
    }
    br.push_back(d.decide);
    row.decide = s + br.size() - 1;
    if (static_cast<int64_t>(br.size()) > limits.max_row - static_cast<int64_t>(s)) {
      fail(ErrorKind::kBadInput, "branch too long: {} tokens with a {}-token state (row limit {})",
           br.size(), s, limits.max_row);
    }
    size_t base = e.ids.size();
    e.ids.insert(e.ids.end(), br.begin(), br.end());
    for (size_t i = 0; i < br.size(); ++i) {
      e.positions.push_back(static_cast<int32_t>(s + i));
      e.segments.push_back(static_cast<int32_t>(k + 1));
    }
    e.decide_index.push_back(base + br.size() - 1);
    std::vector<size_t> opts;
    for (size_t o : row.options) opts.push_back(base + (o - s));
    e.option_index.push_back(std::move(opts));
    e.rows.push_back(std::move(row));
  }
  return e;
}

}  // namespace kev
