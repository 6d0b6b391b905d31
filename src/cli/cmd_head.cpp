// `kev head --bundle DIR`: pointer-head logits and calibrated probabilities for hidden states.
// stdin:  {"questions": [{"decide": [d floats], "options": [[d floats], ...]}, ...]}
// stdout: {"questions": [{"logits": [...], "probabilities": [...]}, ...]}
// Logits are raw (before the temperature); probabilities are softmax(logit / T) per question.
// Every float is printed in its shortest round-trip form. Bad input refuses the whole request.
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <iostream>
#include <iterator>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "cli/command.h"
#include "cli/options.h"
#include "kev/core/error.h"
#include "kev/core/json_strict.h"
#include "kev/head/pointer_head.h"

namespace kev::cli {
namespace {

struct HeadOptions {
  std::string bundle;
  std::string isa = "auto";
};

// "auto", then this build's levels (cpu/isa.h arch_isas()), lowest first.
std::vector<std::string> isa_choices() {
  std::vector<std::string> out{"auto"};
  for (Isa isa : arch_isas()) out.emplace_back(isa_name(isa));
  return out;
}

Isa parse_isa_option(const std::string& name) {
  if (name == "auto") return head_isa();
  std::optional<Isa> isa = parse_isa(name);
  const std::span<const Isa> levels = arch_isas();
  if (!isa || std::find(levels.begin(), levels.end(), *isa) == levels.end())
    fail(ErrorKind::kBadInput, "--isa must be one of {}, got {}", fmt::join(isa_choices(), ", "),
         name);
  return *isa;
}

// Appends one JSON array of d numbers to `out` as floats; `what` names it in errors.
void read_vector(const nlohmann::json& j, size_t d, const std::string& what,
                 std::vector<float>& out) {
  if (!j.is_array()) fail(ErrorKind::kBadInput, "{} must be an array of {} numbers", what, d);
  if (j.size() != d)
    fail(ErrorKind::kBadInput, "{} has {} values but the head's hidden size is {}", what, j.size(),
         d);
  for (size_t i = 0; i < d; ++i) {
    const auto& x = j[i];
    if (!x.is_number())
      fail(ErrorKind::kBadInput, "{} feature {} is {}, not a number", what, i, x.type_name());
    float f = static_cast<float>(x.get<double>());
    if (!std::isfinite(f))
      fail(ErrorKind::kBadInput, "{} feature {} ({}) is not a finite float", what, i,
           x.get<double>());
    out.push_back(f);
  }
}

void append_floats(std::string& out, std::span<const float> values) {
  out += '[';
  for (size_t i = 0; i < values.size(); ++i) {
    if (i) out += ',';
    fmt::format_to(std::back_inserter(out), "{}", values[i]);
  }
  out += ']';
}

int run_head(const HeadOptions& opts) {
  Isa isa = parse_isa_option(opts.isa);
  PointerHead head = PointerHead::load_bundle(opts.bundle);
  const size_t d = head.hidden();

  const std::string text = read_stdin();
  const nlohmann::json request = parse_json_strict(text, "stdin");
  if (!request.is_object() || !request.contains("questions") || !request["questions"].is_array())
    fail(ErrorKind::kBadInput, "stdin must be a JSON object with a \"questions\" array");
  const auto& questions = request["questions"];

  // All hidden states in one buffer; views are taken once it stops growing.
  std::vector<float> values;
  std::vector<size_t> counts;
  for (size_t q = 0; q < questions.size(); ++q) {
    const auto& item = questions[q];
    if (!item.is_object() || !item.contains("decide") || !item.contains("options"))
      fail(ErrorKind::kBadInput, "question {} must be an object with \"decide\" and \"options\"",
           q);
    const auto& options = item["options"];
    if (!options.is_array())
      fail(ErrorKind::kBadInput, "question {}: \"options\" must be an array of vectors", q);
    if (options.empty() || options.size() > kMaxOptions)
      fail(ErrorKind::kBadInput, "question {} has {} options (1 to {} are allowed)", q,
           options.size(), kMaxOptions);
    read_vector(item["decide"], d, fmt::format("question {} decide", q), values);
    for (size_t o = 0; o < options.size(); ++o)
      read_vector(options[o], d, fmt::format("question {} option {}", q, o), values);
    counts.push_back(options.size());
  }
  std::vector<HeadQuestion> qs;
  size_t offset = 0, total = 0;
  for (size_t k : counts) {
    std::span<const float> all(values);
    qs.push_back({all.subspan(offset, d), all.subspan(offset + d, k * d), k});
    offset += (k + 1) * d;
    total += k;
  }
  std::vector<float> logits(total), probs(total);
  HeadWorkspace ws;
  head.project_batch(qs, logits, ws, isa);
  head.calibrate_batch(counts, logits, probs);

  std::string out = "{\"questions\":[";
  offset = 0;
  for (size_t q = 0; q < counts.size(); ++q) {
    if (q) out += ',';
    out += "{\"logits\":";
    append_floats(out, std::span<const float>(logits).subspan(offset, counts[q]));
    out += ",\"probabilities\":";
    append_floats(out, std::span<const float>(probs).subspan(offset, counts[q]));
    out += '}';
    offset += counts[q];
  }
  out += "]}\n";
  if (std::fwrite(out.data(), 1, out.size(), stdout) != out.size() || std::fflush(stdout) != 0)
    fail(ErrorKind::kIo, "could not write the result to stdout");
  return 0;
}

const bool head_registered = register_command(
    "head", "pointer-head logits and calibrated probabilities for hidden states (JSON on stdin)",
    [](CLI::App& app) {
      auto opts = std::make_shared<HeadOptions>();
      app.add_option("--bundle", opts->bundle,
                     "export bundle directory (head.safetensors, "
                     "kev_export.json)")
          ->check(path())
          ->required();
      app.add_option("--isa", opts->isa,
                     "kernel variant: " + fmt::format("{}", fmt::join(isa_choices(), ", ")))
          ->check(one_of(isa_choices()));
      return [opts] { return run_head(*opts); };
    });

}  // namespace
}  // namespace kev::cli
