// kev_consumer BUNDLE: scores the request on stdin with kev::Scorer (as `kev score` does) and
// prints the response; kev_consumer --sha256 TEXT prints kev::sha256_hex(TEXT).
#include <kev/core/error.h>
#include <kev/core/sha256.h>
#include <kev/score/scorer.h>

#include <cstdio>
#include <iostream>
#include <iterator>
#include <string>

int main(int argc, char** argv) {
  if (argc == 3 && std::string(argv[1]) == "--sha256") {
    std::printf("%s\n", kev::sha256_hex(argv[2]).c_str());
    return 0;
  }
  if (argc != 2) return 2;
  try {
    const kev::Scorer scorer(argv[1]);
    const std::string body(std::istreambuf_iterator<char>(std::cin), {});
    std::printf("%s\n", scorer.score(body).response.dump().c_str());
  } catch (const kev::Error& e) {
    std::fprintf(stderr, "kev_consumer: %s\n", e.what());
    return kev::exit_code(e.kind());
  }
  return 0;
}
