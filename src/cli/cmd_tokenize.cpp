// `kev tokenize`: text on stdin -> token ids as JSON on stdout.
//   default   the whole of stdin is one text: {"ids": [...]}
//   --jsonl   every stdin line is a JSON string; one JSON array of ids per output line, written
//             and flushed as soon as its line is read (a co-process gets each answer before it
//             sends the next line, as with kev score --jsonl)
//   --decode  stdin is a JSON array of ids; prints {"text": "..."}
#include <iostream>
#include <iterator>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>

#include "cli/command.h"
#include "cli/options.h"
#include "kev/core/error.h"
#include "kev/text/tokenizer.h"

namespace kev::cli {
namespace {

struct TokenizeOptions {
  std::string tokenizer;
  bool special = false;
  bool jsonl = false;
  bool decode = false;
};

std::string ids_json(const std::vector<int32_t>& ids) {
  std::string s = "[";
  for (size_t i = 0; i < ids.size(); ++i) {
    if (i) s += ',';
    s += std::to_string(ids[i]);
  }
  s += ']';
  return s;
}

int run_tokenize(const TokenizeOptions& o) {
  Tokenizer tok = Tokenizer::from_file(o.tokenizer);
  std::ios::sync_with_stdio(false);
  if (o.decode) {
    const std::string input = read_stdin();
    auto j = nlohmann::json::parse(input, nullptr, false);
    if (j.is_discarded() || !j.is_array()) {
      fail(ErrorKind::kBadInput, "stdin must be a JSON array of token ids");
    }
    std::vector<int32_t> ids;
    for (const auto& v : j) {
      if (!v.is_number_integer()) fail(ErrorKind::kBadInput, "token ids must be integers");
      // Range-checked before narrowing: 4294967297 must not decode as token 1.
      const bool fits = v.is_number_unsigned()
                            ? v.get<uint64_t>() <= INT32_MAX
                            : v.get<int64_t>() >= 0 && v.get<int64_t>() <= INT32_MAX;
      if (!fits) fail(ErrorKind::kBadInput, "token id {} is not in the tokenizer", v.dump());
      ids.push_back(static_cast<int32_t>(v.get<int64_t>()));
    }
    std::cout << nlohmann::json{{"text", tok.decode(ids)}}.dump() << "\n";
    return 0;
  }
  if (o.jsonl) {
    std::string line;
    size_t n = 0;
    while (read_stdin_line(line, n + 1)) {
      ++n;
      auto j = nlohmann::json::parse(line, nullptr, false);
      if (j.is_discarded() || !j.is_string()) {
        fail(ErrorKind::kBadInput, "stdin line {} is not a JSON string", n);
      }
      std::cout << ids_json(tok.encode(j.get_ref<const std::string&>(), o.special)) << "\n";
      std::cout.flush();
    }
    return 0;
  }
  const std::string text = read_stdin();
  std::cout << "{\"ids\":" << ids_json(tok.encode(text, o.special)) << "}\n";
  return 0;
}

const bool tokenize_registered = register_command(
    "tokenize", "tokenize text from stdin with a tokenizer.json (JSON ids out)", [](CLI::App& app) {
      auto o = std::make_shared<TokenizeOptions>();
      app.add_option("--tokenizer", o->tokenizer, "tokenizer.json")->check(path())->required();
      app.add_flag("--special", o->special,
                   "match added/special tokens written in the text (default: plain text)");
      app.add_flag("--jsonl", o->jsonl,
                   "one JSON string per stdin line, one id array per line (written as soon as "
                   "its line is read)");
      app.add_flag("--decode", o->decode, "decode a JSON array of ids from stdin instead");
      return [o] { return run_tokenize(*o); };
    });

}  // namespace
}  // namespace kev::cli
