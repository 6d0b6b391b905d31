// The flags `kev score` and `kev serve` share: encoding limits, request size, answer rounding,
// prefix cache (saved points), compute threads and precision, bound straight into a
// kev::ScorerOptions.
#pragma once
#include <CLI/CLI.hpp>
#include <string>

#include "kev/serve/scorer.h"

namespace kev::cli {

// `--precision fp32|bf16|int8` (kev::Precision, model.h), shared with `kev forward`.
inline CLI::Option* add_precision_flag(CLI::App& app, Precision& p) {
  return app
      .add_option_function<std::string>(
          "--precision", [&p](const std::string& name) { p = parse_precision(name); },
          "projection arithmetic: fp32 (exact, default), bf16 or int8 (faster, within the "
          "parity budget of docs/performance.md)")
      ->check(CLI::IsMember({"fp32", "bf16", "int8"}))
      ->default_str("fp32");
}

inline void add_scorer_flags(CLI::App& app, ScorerOptions& o) {
  app.add_option("--max-state", o.limits.max_state, "max state tokens, <state> included")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  app.add_option("--max-row", o.limits.max_row, "max tokens of state + one question")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  app.add_option("--max-input-tokens", o.max_input_tokens,
                 "max packed tokens of one request (state + every question)")
      ->capture_default_str();
  app.add_flag("--truncate", o.limits.truncate, "truncate an over-long state instead of refusing");
  app.add_option("--decimals", o.decimals, "round answers to N decimals (negative: exact)")
      ->capture_default_str();
  app.add_option("--cache-entries", o.cache_entries,
                 "saved points of states kept (ends of states and checkpoints; 0: no cache)")
      ->capture_default_str();
  app.add_option("--cache-tokens", o.cache_tokens,
                 "state tokens the saved points cover in all; a longer state is not cached")
      ->capture_default_str();
  app.add_option("--cache-bytes", o.cache_bytes,
                 "bytes the saved points hold in all (docs/api.md gives the cost per token and "
                 "per point)")
      ->capture_default_str();
  app.add_option("--cache-checkpoint-tokens", o.checkpoint_tokens,
                 "a computed state also saves a point at the last multiple of this many tokens "
                 "inside it, so a rewritten tail reuses what precedes it (0: ends only)")
      ->capture_default_str();
  app.add_flag("--cache-exact-only", o.exact_only,
               "reuse a saved state only for the very same state (no growing-state reuse; for "
               "comparison)");
  app.add_option("--cache-min-tokens", o.cache_min_tokens,
                 "states shorter than this many tokens are not cached")
      ->capture_default_str();
  app.add_option("--threads", o.forward.threads,
                 "compute threads per request (default: all cores)");
  add_precision_flag(app, o.forward.precision);
}

}  // namespace kev::cli
