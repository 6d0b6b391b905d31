// The flags `kev score` and `kev serve` share: encoding limits, request size, answer rounding,
// prefix cache (saved points), compute threads, precision and the calibration temperature, bound
// straight into a kev::ScorerOptions; the request parser's JSON limits.
#pragma once
#include <CLI/CLI.hpp>
#include <cmath>
#include <cstdlib>
#include <string>

#include "cli/options.h"
#include "kev/core/error.h"
#include "kev/core/json_strict.h"

#include "kev/score/scorer.h"

namespace kev::cli {

// `--precision fp32|bf16|int8|w8a8` (kev::Precision, model.h), shared with `kev forward`.
inline CLI::Option* add_precision_flag(CLI::App& app, Precision& p) {
  return app
      .add_option_function<std::string>(
          "--precision", [&p](const std::string& name) { p = parse_precision(name); },
          "projection arithmetic: fp32 (exact, default), bf16, int8 or w8a8 (faster, within "
          "the parity budget of docs/performance.md)")
      ->check(one_of({"fp32", "bf16", "int8", "w8a8"}))
      ->default_str("fp32");
}

// `--temperature T` (or KEV_TEMPERATURE, as upstream's server reads it): replaces the bundle's
// calibration temperature; 1.0 gives raw probabilities. Unset: the bundle's.
// One rule for the flag and the variable: a finite decimal in (0, kMaxTemperature].
inline CLI::Validator temperature_rule() {
  return number(0, Bound::kOpen, kMaxTemperature, Bound::kClosed);
}

inline CLI::Option* add_temperature_flag(CLI::App& app, double& t) {
  return app
      .add_option("--temperature", t,
                  "calibration temperature instead of the bundle's (1.0: raw probabilities; "
                  "default: the bundle's; also KEV_TEMPERATURE)")
      ->check(temperature_rule());
}

// KEV_TEMPERATURE when --temperature (`flag`) was not given (unset or empty: the bundle's). Call
// from the command's runner; a malformed value is refused (kBadInput) naming the variable.
inline void apply_temperature_env(const CLI::Option* flag, double& t) {
  if (flag && flag->count() > 0) return;
  const char* v = std::getenv("KEV_TEMPERATURE");
  if (!v || !*v) return;
  std::string text = v;
  if (!temperature_rule()(text).empty())
    fail(ErrorKind::kBadInput,
         "KEV_TEMPERATURE must be a finite number > 0 and at most {}, not \"{}\"", kMaxTemperature,
         std::string(v).substr(0, 40));
  t = std::strtod(v, nullptr);
}

// `--max-json-keys`, `--max-json-elements`, `--max-json-depth`: the request parser's limits.
inline void add_json_limit_flags(CLI::App& app, JsonLimits& json) {
  app.add_option("--max-json-keys", json.max_object_keys,
                 "most keys in any one JSON object of a request, else 422 (default 16384)")
      ->check(whole(1, kMaxJsonCount));
  app.add_option("--max-json-elements", json.max_array_elements,
                 "most elements in any one JSON array of a request, else 422 (default 16384)")
      ->check(whole(1, kMaxJsonCount));
  app.add_option("--max-json-depth", json.max_depth,
                 "deepest JSON nesting in a request, else 422 (default 64)")
      ->check(whole(1, kMaxJsonDepthLimit));
}

inline void add_scorer_flags(CLI::App& app, ScorerOptions& o) {
  app.add_option("--max-state", o.limits.max_state,
                 "max state tokens, <state> included (Kev 1.0's 65,536)")
      ->check(whole(1, kMaxTokens))
      ->capture_default_str();
  app.add_option("--max-row", o.limits.max_row,
                 "max tokens of state + one question (Kev 1.0's 73,728)")
      ->check(whole(1, kMaxTokens))
      ->capture_default_str();
  app.add_option("--max-input-tokens", o.max_input_tokens,
                 "max packed tokens of one request, state + every question (0: no cap, as Kev "
                 "1.0)")
      ->check(whole(0, kMaxTokens * 64))
      ->capture_default_str();
  app.add_flag("--usage-details", o.usage_details,
               "add kev's usage fields (state_tokens, cached_tokens, input_tokens_details) to "
               "every response (also KEV_USAGE_DETAILS=1)");
  app.add_flag("--truncate", o.limits.truncate, "truncate an over-long state instead of refusing");
  app.add_option("--decimals", o.decimals, "round answers to N decimals (-1: exact)")
      ->check(integer(-1, 17))
      ->capture_default_str();
  app.add_option("--cache-entries", o.cache_entries,
                 "saved points of states kept (ends of states and checkpoints; 0: no cache)")
      ->check(whole(0, 1 << 20))
      ->capture_default_str();
  app.add_option("--cache-tokens", o.cache_tokens,
                 "state tokens the saved points cover in all; a longer state is not cached")
      ->check(whole(0, uint64_t{1} << 32))
      ->capture_default_str();
  app.add_option("--cache-bytes", o.cache_bytes,
                 "bytes the saved points hold in all (docs/api.md gives the cost per token and "
                 "per point)")
      ->check(whole(0, uint64_t{1} << 44))
      ->capture_default_str();
  app.add_option("--cache-checkpoint-tokens", o.checkpoint_tokens,
                 "a computed state also saves a point at the last multiple of this many tokens "
                 "inside it, so a rewritten tail reuses what precedes it (0: ends only)")
      ->check(whole(0, kMaxTokens))
      ->capture_default_str();
  app.add_flag("--cache-exact-only", o.exact_only,
               "reuse a saved state only for the very same state (no growing-state reuse; for "
               "comparison)");
  app.add_option("--cache-min-tokens", o.cache_min_tokens,
                 "states shorter than this many tokens are not cached")
      ->check(whole(0, kMaxTokens))
      ->capture_default_str();
  app.add_option("--threads", o.forward.threads, "compute threads per request (default: all cores)")
      ->check(whole(0, kMaxThreads));
  app.add_option("--prefill-step", o.forward.prefill_step,
                 "state tokens computed per step: the scratch memory grows with it, the answers do "
                 "not change (a multiple of 64; docs/serving.md)")
      ->check(multiple_of(static_cast<uint64_t>(kGdnChunkTokens), kGdnChunkTokens, kMaxTokens))
      ->capture_default_str();
  add_precision_flag(app, o.forward.precision)
      ->description(
          "projection arithmetic: fp32 (exact, default), bf16, int8 or w8a8 (faster, within the "
          "parity budget of docs/performance.md); also KEV_DTYPE=fp32|float32|bf16|bfloat16, "
          "which this flag overrides");
  add_temperature_flag(app, o.temperature);
  app.add_option("--state-dir", o.state_dir,
                 "keep saved points on disk in this directory as well (created if missing; may "
                 "be shared by replicas), so states stay warm across restarts "
                 "(docs/saved-states.md)")
      ->check(text());
  app.add_option("--state-dir-bytes", o.state_dir_bytes,
                 "bytes the --state-dir files may take in all; the least recently used go first")
      ->check(whole(1 << 20, uint64_t{1} << 50))
      ->capture_default_str();
  app.add_option("--state-drain-timeout", o.state_drain_seconds,
                 "at exit (after a drain), seconds to finish writing the saved points queued for "
                 "--state-dir; what is left then is not written")
      ->check(number(0, Bound::kClosed, 3600, Bound::kClosed))
      ->capture_default_str();
}

}  // namespace kev::cli
