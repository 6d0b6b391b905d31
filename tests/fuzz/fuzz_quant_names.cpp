// Fuzzes the two parsers of quantized-bundle names (kev/model/quant_plan.h) on arbitrary bytes:
// a stored part's name after `W@` (parse_part_name) and a selection spec (parse_selection, the
// `--q8 SPEC` options and KEV_INT8_CLASSES). The first byte picks the row and layer counts; the
// rest is the text given to both. Each result must equal an independent oracle's, written here
// from the documented grammar (std::regex, then std::stoll on the captured digits): accepted iff
// the oracle accepts, with its rows and kind, or its (class, layer) pairs; a spec's refusal is a
// kev::Error kBadInput naming the flag and the oracle's reason, never a crash or another exception.
#include <cstddef>
#include <cstdint>
#include <limits>
#include <optional>
#include <regex>
#include <set>
#include <string>
#include <utility>

#include "kev/core/error.h"
#include "kev/model/quant_plan.h"

namespace {

// Both grammars' numbers: decimal, no sign or space, no leading zero but "0", 1 to 18 digits.
const std::string kNumber = "(0|[1-9][0-9]{0,17})";

// The part name's oracle.
std::optional<kev::PartName> part_oracle(const std::string& s, int64_t rows) {
  static const std::regex re(kNumber + "-" + kNumber + "\\.([a-z0-9]{1,7})");
  std::smatch m;
  if (!std::regex_match(s, m, re)) return std::nullopt;
  const int64_t r0 = std::stoll(m[1].str()), r1 = std::stoll(m[2].str());
  if (!(0 <= r0 && r0 < r1 && r1 <= rows)) return std::nullopt;
  return kev::PartName{r0, r1, m[3].str()};
}

// The documented class names, in the documented order, and the aliases.
const char* const kNames[12] = {"attn_q", "attn_k", "attn_v",  "attn_o",   "gdn_q",  "gdn_k",
                                "gdn_v",  "gdn_z",  "gdn_out", "mlp_gate", "mlp_up", "mlp_down"};

using Pairs = std::set<std::pair<std::string, int64_t>>;

struct SpecVerdict {
  bool ok = true;
  bool bad_range = false;  // when refused: the first bad entry's range (else its class)
  Pairs pairs;
};

// The spec's oracle: splits at every ',' by hand, matches each entry whole.
SpecVerdict spec_oracle(const std::string& spec, int64_t layers) {
  static const std::regex entry_re("([^@]*)(@" + kNumber + "-" + kNumber + ")?");
  SpecVerdict v;
  std::string rest = spec;
  while (true) {
    const size_t comma = rest.find(',');
    const std::string entry = rest.substr(0, comma);
    if (!entry.empty() && entry != "none") {
      const size_t at = entry.find('@');
      const std::string cls = entry.substr(0, at);
      std::smatch m;
      int64_t first = 0, last = layers - 1;
      if (at != std::string::npos) {
        const bool matched = std::regex_match(entry, m, entry_re) && m[2].matched;
        if (matched) {
          first = std::stoll(m[3].str());
          last = std::stoll(m[4].str());
        }
        if (!matched || first > last || last >= layers) {
          v.ok = false;
          v.bad_range = true;
          return v;
        }
      }
      std::set<std::string> classes;
      for (const char* n : kNames)
        if (cls == "all" || cls == n) classes.insert(n);
      if (cls == "gdn_qkv") classes = {"gdn_q", "gdn_k", "gdn_v"};
      if (classes.empty()) {
        v.ok = false;
        return v;
      }
      for (const std::string& c : classes)
        for (int64_t l = first; l <= last; ++l) v.pairs.insert({c, l});
    }
    if (comma == std::string::npos) break;
    rest = rest.substr(comma + 1);
  }
  return v;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0 || size > 512) return 0;
  static const int64_t kBigRows[8] = {std::numeric_limits<int64_t>::max(),
                                      999'999'999'999'999'999,
                                      1'000'000'000'000'000'000,
                                      123'456'789'012'345'678,
                                      4096,
                                      65536,
                                      int64_t{1} << 31,
                                      0};
  const uint8_t b = data[0];
  const int64_t rows = (b & 0x80) ? kBigRows[b & 7] : b & 0x7f;
  const int64_t layers = b & 0x3f;
  const std::string text(reinterpret_cast<const char*>(data + 1), size - 1);

  // Part names.
  const std::optional<kev::PartName> got = kev::parse_part_name(text, rows);
  const std::optional<kev::PartName> want = part_oracle(text, rows);
  if (got.has_value() != want.has_value()) __builtin_trap();
  if (got && (got->row0 != want->row0 || got->row1 != want->row1 || got->kind != want->kind))
    __builtin_trap();

  // Specs.
  if (kev::kProjectionClasses != 12) __builtin_trap();
  for (int c = 0; c < 12; ++c)
    if (std::string(kev::kProjectionClassNames[c]) != kNames[c]) __builtin_trap();
  const SpecVerdict oracle = spec_oracle(text, layers);
  try {
    const kev::LayerSelection s = kev::parse_selection(text, layers, "--q8");
    if (!oracle.ok) __builtin_trap();
    Pairs pairs;
    for (int c = 0; c < 12; ++c) {
      if (s.layers[c].size() != static_cast<size_t>(layers)) __builtin_trap();
      for (int64_t l = 0; l < layers; ++l)
        if (s.has(l, c)) pairs.insert({kNames[c], l});
    }
    if (pairs != oracle.pairs) __builtin_trap();
  } catch (const kev::Error& e) {
    if (oracle.ok || e.kind() != kev::ErrorKind::kBadInput) __builtin_trap();
    const std::string msg = e.what();
    const char* reason = oracle.bad_range ? "--q8 entry '" : "--q8: unknown projection class '";
    if (msg.find(reason) == std::string::npos) __builtin_trap();
  }
  return 0;
}
