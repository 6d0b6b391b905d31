// `kev score`: API-shaped request(s) on stdin -> response(s) on stdout.
#include <cstdio>
#include <iostream>
#include <string>

#include "cli/command.h"
#include "kev/core/error.h"
#include "kev/serve/scorer.h"

namespace kev::cli {
namespace {

struct ScoreOptions {
  std::string bundle;
  int64_t max_state = ScorerOptions{}.limits.max_state;
  int64_t max_row = ScorerOptions{}.limits.max_row;
  size_t max_input_tokens = ScorerOptions{}.max_input_tokens;
  bool truncate = false;
  bool jsonl = false;
  int decimals = 4;
  size_t cache_entries = 16;
};

OrderedJson error_object(const Error& e) {
  return {{"detail", e.what()}, {"status", http_status(e.kind())}};
}

int run_score(const ScoreOptions& o) {
  ScorerOptions so;
  so.limits.max_state = o.max_state;
  so.limits.max_row = o.max_row;
  so.max_input_tokens = o.max_input_tokens;
  so.limits.truncate = o.truncate;
  so.decimals = o.decimals;
  so.cache_entries = o.cache_entries;
  Scorer scorer(o.bundle, so);
  if (!o.jsonl) {
    std::string body(std::istreambuf_iterator<char>(std::cin), {});
    std::cout << scorer.score(body).response.dump() << "\n";
    return 0;
  }
  // JSON Lines: one response line per non-empty request line; a bad line gets an error
  // object and the stream goes on. Exit 0 only if every line was answered.
  int status = 0;
  std::string line;
  while (std::getline(std::cin, line)) {
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    if (!nlohmann::json::accept(line)) {  // malformed JSON is a 400, as the HTTP API says
      std::cout
          << OrderedJson{{"detail", "the request line is not valid JSON"}, {"status", 400}}.dump()
          << "\n";
      status = exit_code(ErrorKind::kBadInput);
      continue;
    }
    try {
      std::cout << scorer.score(line).response.dump() << "\n";
    } catch (const Error& e) {
      if (e.kind() == ErrorKind::kInterrupted) throw;
      std::cout << error_object(e).dump() << "\n";
      status = exit_code(e.kind());
    }
    std::cout.flush();
  }
  return status;
}

const bool registered = register_command(
    "score", "score API-shaped requests (JSON, or JSON Lines with --jsonl) from a bundle",
    [](CLI::App& app) {
      auto o = std::make_shared<ScoreOptions>();
      app.add_option("--bundle", o->bundle, "export bundle directory")->required();
      app.add_option("--max-state", o->max_state, "max state tokens, <state> included");
      app.add_option("--max-row", o->max_row, "max tokens of state + one question");
      app.add_option("--max-input-tokens", o->max_input_tokens,
                     "max packed tokens of one request (state + every question)");
      app.add_flag("--truncate", o->truncate, "truncate an over-long state instead of refusing");
      app.add_flag("--jsonl", o->jsonl, "stdin is a JSON Lines stream of requests");
      app.add_option("--decimals", o->decimals, "round answers to N decimals (negative: exact)");
      app.add_option("--cache-entries", o->cache_entries, "state prefixes kept in the LRU cache");
      return [o] { return run_score(*o); };
    });

}  // namespace
}  // namespace kev::cli
