#!/usr/bin/env bash
# Runs every libFuzzer target in build/fuzz for N seconds (default 20) on its seed corpus
# (tests/fuzz/corpus/<target>/), never adding to the committed corpus, as many at once as there
# are cores (KEV_FUZZ_JOBS sets it). Exits non-zero on a crash, after printing its log.
set -euo pipefail
cd "$(dirname "$0")/.."
seconds=${1:-20}
jobs=${KEV_FUZZ_JOBS:-$(nproc)}
logs=$(mktemp -d)

# fuzz_one BIN: one target for $seconds on a copy of its corpus; its log in $logs/NAME.log.
fuzz_one() {
  local bin=$1 name work
  name=$(basename "$bin")
  work=$(mktemp -d)
  cp -r "tests/fuzz/corpus/$name/." "$work/" 2>/dev/null || true
  if "$bin" -max_total_time="$seconds" -print_final_stats=1 -rss_limit_mb=4096 "$work" \
    >"$logs/$name.log" 2>&1; then
    grep -E "stat::number_of_executed_units|stat::peak_rss_mb" "$logs/$name.log" | sed "s/^/  $name /" >&2
    rm -rf "$work"
  else
    touch "$logs/$name.failed"
    rm -rf "$work"
    return 1
  fi
}

running=0
for bin in build/fuzz/tests/fuzz/fuzz_*; do
  [ -x "$bin" ] || continue
  echo "fuzz: $(basename "$bin") for ${seconds}s" >&2
  fuzz_one "$bin" &
  running=$((running + 1))
  if ((running >= jobs)); then wait -n || true; running=$((running - 1)); fi
done
wait || true
status=0
for failed in "$logs"/*.failed; do
  [ -e "$failed" ] || continue
  name=$(basename "$failed" .failed)
  tail -50 "$logs/$name.log" >&2
  echo "fuzz: $name FAILED" >&2
  status=1
done
rm -rf "$logs"
exit "$status"
