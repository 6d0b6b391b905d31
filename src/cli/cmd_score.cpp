// `kev score`: API-shaped request(s) on stdin -> response(s) on stdout. Each body is decoded by
// the server's decoder (kev/text/request_decoder.h) under the same options (--date-facts,
// --max-json-*, the upstream environment of cli/upstream_env.h), so a response is byte for
// byte the body `kev serve` answers for the same request and flags.
#include <cstdio>
#include <iostream>
#include <string>

#include "cli/command.h"
#include "cli/options.h"
#include "cli/scorer_flags.h"
#include "cli/upstream_env.h"
#include "kev/core/error.h"
#include "kev/score/scorer.h"
#include "kev/text/request_decoder.h"

namespace kev::cli {
namespace {

struct ScoreOptions {
  std::string bundle;
  ScorerOptions scorer;
  // As `kev serve`'s defaults (ServeOptions::json).
  DecodeOptions decode{.json = {.max_object_keys = 16384, .max_array_elements = 16384}};
  bool jsonl = false;
};

OrderedJson error_object(const Error& e) {
  return {{"detail", e.what()}, {"status", http_status(e.kind())}};
}

int run_score(const ScoreOptions& o) {
  ScorerOptions options = o.scorer;
  options.state_log = [](const std::string& line) { std::fprintf(stderr, "%s\n", line.c_str()); };
  Scorer scorer(o.bundle, options);
  if (!o.jsonl) {
    const std::string body = read_stdin();
    auto decoded = decode_request(body, o.decode);
    if (auto* refused = std::get_if<Refusal>(&decoded)) throw Error(refused->kind, refused->detail);
    std::cout << scorer.score(std::get<ApiRequest>(decoded)).response.dump() << "\n";
    return 0;
  }
  // JSON Lines: one response line per non-empty request line; a bad line gets an error
  // object and the stream goes on. Exit 0 only if every line was answered.
  int status = 0;
  std::string line;
  for (size_t number = 1; read_stdin_line(line, number); ++number) {
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    auto decoded = decode_request(line, o.decode);
    if (auto* refused = std::get_if<Refusal>(&decoded)) {
      std::cout << OrderedJson{{"detail", refused->detail}, {"status", refused->status}}.dump()
                << "\n";
      status = exit_code(refused->kind);
      std::cout.flush();
      continue;
    }
    try {
      std::cout << scorer.score(std::get<ApiRequest>(decoded)).response.dump() << "\n";
    } catch (const Error& e) {
      if (e.kind() == ErrorKind::kInterrupted) throw;
      std::cout << error_object(e).dump() << "\n";
      status = exit_code(e.kind());
    }
    std::cout.flush();
  }
  return status;
}

const bool score_registered = register_command(
    "score", "score API-shaped requests (JSON, or JSON Lines with --jsonl) from a bundle",
    [](CLI::App& app) {
      auto o = std::make_shared<ScoreOptions>();
      app.add_option("--bundle", o->bundle, "export bundle directory")->check(path())->required();
      app.add_flag("--jsonl", o->jsonl, "stdin is a JSON Lines stream of requests");
      CLI::Option* date_facts =
          app.add_flag("--date-facts", o->decode.date_facts,
                       "add day counts between the state's absolute dates before scoring "
                       "(upstream; also KEV_DATE_FACTS=1), as kev serve --date-facts");
      add_json_limit_flags(app, o->decode.json);
      add_scorer_flags(app, o->scorer);
      const EnvFlags flags = env_flags(app, date_facts);
      CLI::Option* temperature = app.get_option_no_throw("--temperature");
      return [o, flags, temperature] {
        apply_upstream_env(flags, o->scorer, o->decode.date_facts);
        apply_temperature_env(temperature, o->scorer.temperature);
        return run_score(*o);
      };
    });

}  // namespace
}  // namespace kev::cli
