// A test hook over the answer mapping (text/api.h), for the Kev 1.0 conformance suite
// (tests/integration/test_answers_conformance.py): it drives answers_json(), python_sum() and
// python_round() with probabilities a test chooses (ties, all zeros, denormals), which no model
// produces on demand. Not installed; built with the tests.
//
// stdin, one JSON object a line, one line of output each:
//   {"request": <a /v1/systemone request>, "probabilities": [[p, ...] per question],
//    "decimals": n (optional, default 4)}  ->  the answers object, as the server prints it
//   {"sum": [x, ...]}                       ->  {"sum": "<repr of python_sum(x)>"}
//   {"round": x, "decimals": n}             ->  {"round": "<repr of python_round(x, n)>"}
// (as Python's repr text, so that infinities and -0.0 come through)
// A line the mapping refuses prints {"error": "<message>"}.
#include <iostream>
#include <string>
#include <vector>

#include "kev/core/error.h"
#include "kev/core/json_strict.h"
#include "kev/text/api.h"
#include "kev/text/python_compat.h"

int main() {
  std::string line;
  while (std::getline(std::cin, line)) {
    try {
      const kev::OrderedJson in = kev::OrderedJson::parse(line);
      const int decimals = in.value("decimals", 4);
      if (in.contains("sum")) {
        const std::vector<double> xs = in["sum"].get<std::vector<double>>();
        std::cout << kev::OrderedJson{{"sum", kev::python_float_repr(kev::python_sum(xs))}}.dump()
                  << "\n";
      } else if (in.contains("round")) {
        const double x = in["round"].get<double>();
        std::cout << kev::OrderedJson{{"round",
                                       kev::python_float_repr(kev::python_round(x, decimals))}}
                         .dump()
                  << "\n";
      } else {
        const kev::ApiRequest request = kev::request_from_json(in["request"]);
        const auto p = in["probabilities"].get<std::vector<std::vector<double>>>();
        std::cout << kev::answers_json(request, p, {decimals}).dump() << "\n";
      }
    } catch (const std::exception& e) {
      std::cout << kev::OrderedJson{{"error", e.what()}}.dump() << "\n";
    }
  }
  return 0;
}
