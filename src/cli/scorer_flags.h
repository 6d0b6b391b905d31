// The flags `kev score` and `kev serve` share: encoding limits, request size, answer rounding,
// prefix cache and compute threads, bound straight into a kev::ScorerOptions.
#pragma once
#include <CLI/CLI.hpp>

#include "kev/serve/scorer.h"

namespace kev::cli {

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
                 "state prefixes kept in the LRU cache (0: no cache)")
      ->capture_default_str();
  app.add_option("--cache-tokens", o.cache_tokens,
                 "state tokens the cache holds in all; a longer state is not cached")
      ->capture_default_str();
  app.add_option("--cache-min-tokens", o.cache_min_tokens,
                 "states shorter than this many tokens are not cached")
      ->capture_default_str();
  app.add_option("--threads", o.forward.threads,
                 "compute threads per request (default: all cores)");
}

}  // namespace kev::cli
