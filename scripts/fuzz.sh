#!/usr/bin/env bash
# Runs every libFuzzer target in build/fuzz for N seconds (default 20) on its seed corpus
# (tests/fuzz/corpus/<target>/), never adding to the committed corpus. Exits non-zero on a crash.
set -euo pipefail
cd "$(dirname "$0")/.."
seconds=${1:-20}
for bin in build/fuzz/tests/fuzz/fuzz_*; do
  [ -x "$bin" ] || continue
  name=$(basename "$bin")
  work=$(mktemp -d)
  cp -r "tests/fuzz/corpus/$name/." "$work/" 2>/dev/null || true
  echo "fuzz: $name for ${seconds}s" >&2
  "$bin" -max_total_time="$seconds" -print_final_stats=1 -rss_limit_mb=4096 "$work" 2>"$work.log" || {
    tail -50 "$work.log" >&2; echo "fuzz: $name FAILED" >&2; exit 1; }
  grep -E "stat::number_of_executed_units|stat::peak_rss_mb" "$work.log" | sed "s/^/  $name /" >&2
  rm -rf "$work" "$work.log"
done
