// The one validation rule for the options of every command (docs/cli.md "Options"). Each option
// gets one of these checks; it runs on the text before CLI11 converts it, so "-1" never wraps
// into a size_t and "nan" never reaches a comparison:
//
//   app.add_option("--warmup", o->warmup, "...")->check(whole(0, kMaxWarmup));
//
// whole: decimal digits only, MIN..MAX. integer: an optional "-" and digits, MIN..MAX. number: a
// finite decimal number in a stated interval (no nan, inf or hex). one_of: one of the listed
// words. text / path: non-empty, valid UTF-8, no control characters, at most 4096 bytes.
// A refusal reads "VALUE: why"; main() prints it as one sentence "kev CMD: --option VALUE: why"
// and exits 2. check_every_option() gives any option still without a check one chosen by its
// type (so an option added without thought cannot wrap), and refuse_parse_error() turns every
// CLI11 parse error (unknown option, missing value, excess arguments) into the same one
// sentence and exit 2.
#pragma once
#include <CLI/CLI.hpp>

#include <cstdint>
#include <string>
#include <vector>

#include "kev/core/threads.h"  // kMaxThreads

namespace kev::cli {

inline constexpr uint64_t kMaxTokens = 1u << 20;     // token counts (the model's position limit)
inline constexpr uint64_t kMaxJsonCount = 1u << 24;  // --max-json-keys / --max-json-elements
inline constexpr size_t kMaxTextBytes = 4096;        // a path, URL, host or name
inline constexpr double kMaxTemperature = 1e6;       // calibration temperatures

enum class Bound { kClosed, kOpen };

CLI::Validator whole(uint64_t min, uint64_t max);
// A whole number from min to max that is a multiple of unit.
CLI::Validator multiple_of(uint64_t unit, uint64_t min, uint64_t max);
CLI::Validator integer(int64_t min, int64_t max);
CLI::Validator number(double lo, Bound lo_bound, double hi, Bound hi_bound);
CLI::Validator one_of(std::vector<std::string> words);
CLI::Validator text();
CLI::Validator path();

// Standard input, read whole (kev score, head, encode, tokenize) or a line at a time (--jsonl):
// at most kMaxStdinBytes, else Error(kBadInput) "stdin holds more than N bytes" (a line: "stdin
// line N is longer than ...") before more is held. read_stdin_line returns false at the end.
inline constexpr size_t kMaxStdinBytes = size_t{1} << 30;
std::string read_stdin();
bool read_stdin_line(std::string& line, size_t number);

// The value as a refusal shows it: as given, or quoted (JSON-style) when empty or holding
// spaces, control characters or more than 64 bytes (then shortened).
std::string shown(const std::string& value);

// Gives every value-taking option of `app` and its subcommands that has no check yet the
// default for its type: whole numbers for unsigned, integers for signed, finite numbers for
// floating-point, text otherwise.
void check_every_option(CLI::App& app);

// Prints the one-sentence refusal for a CLI11 parse error on stderr and returns the exit code
// (0 for --help and --version, which it prints instead; 2 otherwise). `app` is the top level.
int refuse_parse_error(CLI::App& app, const CLI::ParseError& e);

}  // namespace kev::cli
