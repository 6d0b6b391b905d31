// `kev encode`: an API request (JSON on stdin) -> the Kev token layout as JSON on stdout:
// ids, positions, segments, decide_index, option_index, state_length, state_tokens, truncated,
// questions (id, type, keys, options as text) and rows (per question: row ids = state + branch,
// decide and option indices within the row).
#include <iostream>
#include <iterator>
#include <memory>
#include <string>

#include "cli/command.h"
#include "cli/options.h"
#include "kev/text/api.h"
#include "kev/text/encoding.h"
#include "kev/text/tokenizer.h"

namespace kev::cli {
namespace {

struct EncodeOptions {
  std::string tokenizer;
  int64_t max_state = EncodeLimits{}.max_state;
  int64_t max_row = EncodeLimits{}.max_row;
  bool truncate = false;
};

int run_encode(const EncodeOptions& o) {
  // The request is checked before the (larger) tokenizer is loaded: refusals stay cheap.
  const std::string body = read_stdin();
  ApiRequest req = parse_request(body);
  Tokenizer tok = Tokenizer::from_file(o.tokenizer);
  Delimiters delims = delimiters_of(tok);
  EncodeLimits limits;
  limits.max_state = o.max_state;
  limits.max_row = o.max_row;
  limits.truncate = o.truncate;
  Encoding e = encode_record(tok, delims, to_record(req), limits);

  OrderedJson out = OrderedJson::object();
  out["model"] = req.model;
  out["ids"] = e.ids;
  out["positions"] = e.positions;
  out["segments"] = e.segments;
  out["decide_index"] = e.decide_index;
  out["option_index"] = e.option_index;
  out["state_length"] = e.state_length;
  out["state_tokens"] = e.state_tokens;
  out["truncated"] = e.truncated;
  OrderedJson questions = OrderedJson::array();
  OrderedJson rows = OrderedJson::array();
  for (size_t k = 0; k < req.questions.size(); ++k) {
    const ApiQuestion& q = req.questions[k];
    questions.push_back({{"id", q.id},
                         {"type", type_name(q.type)},
                         {"instructions", q.instructions},
                         {"keys", q.keys},
                         {"options", q.options}});
    rows.push_back({{"id", q.id},
                    {"ids", e.row_ids(k)},
                    {"decide", e.rows[k].decide},
                    {"options", e.rows[k].options}});
  }
  out["questions"] = std::move(questions);
  out["rows"] = std::move(rows);
  out["delimiters"] = {{"state", delims.state},
                       {"question", delims.question},
                       {"option_open", delims.option_open},
                       {"option_close", delims.option_close},
                       {"decide", delims.decide}};
  std::cout << out.dump() << "\n";
  return 0;
}

const bool encode_registered = register_command(
    "encode", "encode an API request (stdin) into Kev token rows (JSON out)", [](CLI::App& app) {
      auto o = std::make_shared<EncodeOptions>();
      app.add_option("--tokenizer", o->tokenizer, "tokenizer.json")->check(path())->required();
      app.add_option("--max-state", o->max_state, "state token limit, <state> included")
          ->check(whole(1, kMaxTokens));
      app.add_option("--max-row", o->max_row, "row token limit (state + one question's branch)")
          ->check(whole(1, kMaxTokens));
      app.add_flag("--truncate", o->truncate,
                   "cut an over-long state to max-state tokens instead of refusing it");
      return [o] { return run_encode(*o); };
    });

}  // namespace
}  // namespace kev::cli
