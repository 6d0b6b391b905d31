// Upstream's environment configuration (kev/serve.py), shared by `kev serve` and `kev score`
// so that both read the same variables the same way: read when the matching flag is not given;
// unset or empty means "not set"; anything malformed stops start-up (exit 2) with one sentence
// naming the variable (a value is shown cut to 64 printable characters).
//   KEV_TRUNCATE_STATES (0|1), KEV_DATE_FACTS (0|1), KEV_PREFIX_CACHE, KEV_PREFIX_MAX_TOKENS,
//   KEV_PREFIX_MIN_TOKENS (whole numbers), KEV_DTYPE (Kev 1.0's fp32 | bf16, and float32 |
//   bfloat16; 1.0's fp16 and anything else are refused by name) -> --precision, and kev's
//   KEV_USAGE_DETAILS (0|1) -> --usage-details; `kev serve` also reads KEV_API_KEY[_FILE].
#pragma once
#include <CLI/CLI.hpp>
#include <charconv>
#include <cstdlib>
#include <optional>
#include <string>

#include "kev/core/error.h"
#include "kev/score/scorer.h"

namespace kev::cli {

inline std::optional<std::string> env(const char* name) {
  const char* v = std::getenv(name);
  if (!v || !*v) return std::nullopt;
  return std::string(v);
}

// A variable's value as an error message shows it: cut to 64 characters, each one outside
// printable ASCII replaced by '?'.
inline std::string env_value_shown(const std::string& v) {
  std::string out;
  for (unsigned char c : v.substr(0, 64)) out += c >= 0x20 && c < 0x7f ? static_cast<char>(c) : '?';
  return out;
}

inline std::optional<bool> env_bool(const char* name) {
  auto v = env(name);
  if (!v) return std::nullopt;
  if (*v != "0" && *v != "1")
    fail(ErrorKind::kBadInput, "{} must be 0 or 1, not \"{}\"", name, env_value_shown(*v));
  return *v == "1";
}

inline std::optional<size_t> env_count(const char* name) {
  auto v = env(name);
  if (!v) return std::nullopt;
  size_t n = 0;
  auto [end, ec] = std::from_chars(v->data(), v->data() + v->size(), n);
  if (ec != std::errc() || end != v->data() + v->size() || n > (size_t{1} << 40))
    fail(ErrorKind::kBadInput, "{} must be a whole number of at most 2^40, not \"{}\"", name,
         env_value_shown(*v));
  return n;
}

// The flags (add_scorer_flags and --date-facts) whose variables they override.
struct EnvFlags {
  CLI::Option *truncate, *date_facts, *cache_entries, *cache_tokens, *cache_min, *precision,
      *usage_details;
};

inline EnvFlags env_flags(CLI::App& app, CLI::Option* date_facts) {
  return {app.get_option_no_throw("--truncate"),         date_facts,
          app.get_option_no_throw("--cache-entries"),    app.get_option_no_throw("--cache-tokens"),
          app.get_option_no_throw("--cache-min-tokens"), app.get_option_no_throw("--precision"),
          app.get_option_no_throw("--usage-details")};
}

// KEV_DTYPE as Kev 1.0's LoadOptions.from_env names the dtypes (bf16, fp32), plus the torch
// names (bfloat16, float32). 1.0 also takes fp16, which kev does not compute; 1.0 silently
// ignores any other value, which kev refuses.
inline std::optional<Precision> env_dtype() {
  auto v = env("KEV_DTYPE");
  if (!v) return std::nullopt;
  if (*v == "fp32" || *v == "float32") return Precision::kFp32;
  if (*v == "bf16" || *v == "bfloat16") return Precision::kBf16;
  if (*v == "fp16" || *v == "float16")
    fail(ErrorKind::kUnsupported,
         "KEV_DTYPE={} (float16) is not computed by kev: use fp32 or bf16 (or --precision)", *v);
  fail(ErrorKind::kBadInput, "KEV_DTYPE must be fp32, float32, bf16 or bfloat16, not \"{}\"",
       env_value_shown(*v));
}

// After parsing: each variable whose flag was not given sets its option.
inline void apply_upstream_env(const EnvFlags& f, ScorerOptions& scorer, bool& date_facts) {
  auto unset = [](CLI::Option* o) { return !o || o->count() == 0; };
  if (auto v = env_bool("KEV_TRUNCATE_STATES"); v && unset(f.truncate)) scorer.limits.truncate = *v;
  if (auto v = env_bool("KEV_DATE_FACTS"); v && unset(f.date_facts)) date_facts = *v;
  if (auto v = env_count("KEV_PREFIX_CACHE"); v && unset(f.cache_entries))
    scorer.cache_entries = *v;
  if (auto v = env_count("KEV_PREFIX_MAX_TOKENS"); v && unset(f.cache_tokens))
    scorer.cache_tokens = *v;
  if (auto v = env_count("KEV_PREFIX_MIN_TOKENS"); v && unset(f.cache_min))
    scorer.cache_min_tokens = *v;
  if (auto v = env_dtype(); v && unset(f.precision)) scorer.forward.precision = *v;
  if (auto v = env_bool("KEV_USAGE_DETAILS"); v && unset(f.usage_details))
    scorer.usage_details = *v;
}

}  // namespace kev::cli
