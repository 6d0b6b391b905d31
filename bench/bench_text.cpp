// Tokenizer throughput: bench_text TOKENIZER.json STRINGS.jsonl [--special]
// Prints one JSON line: load_seconds (tokenizer.json -> ready), seconds and tokens for one pass
// over all strings (the word cache starts empty, as a fresh process's would), and a second,
// warm pass. Driven by bench/bench_text.py, which runs transformers.js on the same strings.
#include <chrono>
#include <cstdio>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "kev/core/error.h"
#include "kev/text/tokenizer.h"

int main(int argc, char** argv) {
  if (argc < 3) {
    std::fprintf(stderr, "usage: bench_text TOKENIZER.json STRINGS.jsonl [--special]\n");
    return 2;
  }
  bool special = argc > 3 && std::string(argv[3]) == "--special";
  std::vector<std::string> lines;
  std::ifstream in(argv[2]);
  for (std::string line; std::getline(in, line);) {
    if (!line.empty()) lines.push_back(nlohmann::json::parse(line).get<std::string>());
  }
  using Clock = std::chrono::steady_clock;
  auto seconds = [](Clock::time_point a, Clock::time_point b) {
    return std::chrono::duration<double>(b - a).count();
  };
  try {
    auto t0 = Clock::now();
    kev::Tokenizer tok = kev::Tokenizer::from_file(argv[1]);
    auto t1 = Clock::now();
    size_t tokens = 0;
    std::vector<int32_t> ids;
    for (const auto& s : lines) {
      ids.clear();
      tok.encode_into(s, special, ids);
      tokens += ids.size();
    }
    auto t2 = Clock::now();
    for (const auto& s : lines) {
      ids.clear();
      tok.encode_into(s, special, ids);
    }
    auto t3 = Clock::now();
    size_t bytes = 0;
    for (const auto& s : lines) bytes += s.size();
    std::printf(
        "{\"load_seconds\": %.4f, \"seconds\": %.4f, \"warm_seconds\": %.4f, \"tokens\": %zu, "
        "\"bytes\": %zu, \"strings\": %zu}\n",
        seconds(t0, t1), seconds(t1, t2), seconds(t2, t3), tokens, bytes, lines.size());
  } catch (const kev::Error& e) {
    std::fprintf(stderr, "bench_text: %s\n", e.what());
    return 1;
  }
  return 0;
}
