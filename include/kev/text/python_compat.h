// How upstream's Python writes numbers and JSON, for the answers and usage fields Kev 1.0's
// server returns: one home for these facts of CPython's output (text/api.h, the scorer and the
// server use them).
//
// Contract:
// - python_float_repr(v): repr(float) exactly: the shortest digits that round-trip, in
//   positional form for 1e-4 <= |v| < 1e16 and "d.ddde[+-]XX" otherwise; "nan", "inf", "-inf",
//   "0.0", "-0.0".
// - python_round(x, n): round(x, n): the exact binary value rounded to n decimals, ties to
//   even, converted back to the nearest double; n < 0 or a non-finite x returns x unchanged.
// - python_sum(items): CPython >= 3.12 sum() of floats (start 0): Neumaier-compensated, the
//   compensation added at the end when non-zero and finite.
// - python_json_dumps(value): json.dumps(value) with its defaults: ", " and ": " separators,
//   ensure_ascii (a backslash-u escape of four hex digits per UTF-16 unit, surrogate pairs beyond
//   the BMP), floats as repr(), True/False/None as true/false/null. What upstream tokenizes for
//   usage.output_tokens.
// Pure functions; thread-safe.
#pragma once
#include <span>
#include <string>

#include "kev/core/json_strict.h"  // OrderedJson

namespace kev {

std::string python_float_repr(double v);
double python_round(double x, int decimals);
double python_sum(std::span<const double> items);
std::string python_json_dumps(const OrderedJson& value);

}  // namespace kev
