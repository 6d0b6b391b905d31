// `kev score`: API-shaped request(s) on stdin -> response(s) on stdout.
#include <cstdio>
#include <iostream>
#include <string>

#include "cli/command.h"
#include "cli/scorer_flags.h"
#include "kev/core/error.h"
#include "kev/serve/scorer.h"

namespace kev::cli {
namespace {

struct ScoreOptions {
  std::string bundle;
  ScorerOptions scorer;
  bool jsonl = false;
};

OrderedJson error_object(const Error& e) {
  return {{"detail", e.what()}, {"status", http_status(e.kind())}};
}

int run_score(const ScoreOptions& o) {
  Scorer scorer(o.bundle, o.scorer);
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
      app.add_flag("--jsonl", o->jsonl, "stdin is a JSON Lines stream of requests");
      add_scorer_flags(app, o->scorer);
      CLI::Option* temperature = app.get_option_no_throw("--temperature");
      return [o, temperature] {
        apply_temperature_env(temperature, o->scorer.temperature);
        return run_score(*o);
      };
    });

}  // namespace
}  // namespace kev::cli
