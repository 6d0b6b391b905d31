#!/usr/bin/env bash
# The serve suites and the ThreadSanitizer run with CPU hogs beside them: what a CI run on a
# busy machine looks like (docs/serving.md "What a client can rely on"). Needs build/ci (kev) and,
# unless KEV_TSAN=0, build/tsan (kev, test_serve), as scripts/test.sh builds them.
#   KEV_HOGS (default 4) busy loops; KEV_ROUNDS (default 2) times each suite is run.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
hogs=()
stop_hogs() {
  for pid in "${hogs[@]}"; do kill "$pid" 2>/dev/null || true; done
}
trap stop_hogs EXIT
for _ in $(seq "${KEV_HOGS:-4}"); do
  (while :; do :; done) &
  hogs+=("$!")
done
echo "serve_under_load: ${#hogs[@]} CPU hogs on $(nproc) cores" >&2
for round in $(seq "${KEV_ROUNDS:-2}"); do
  echo "== round $round: serve suites" >&2
  KEV_BIN="$root/build/ci/kev" KEV_SOURCE_DIR="$root" PYTHONDONTWRITEBYTECODE=1 \
    /usr/bin/python3 -m pytest -q -p no:cacheprovider tests/integration/test_serve_*.py \
    tests/integration/test_serve.py tests/integration/test_lifecycle.py \
    tests/integration/test_observability.py
  if [ "${KEV_TSAN:-1}" != 0 ]; then
    echo "== round $round: ThreadSanitizer" >&2
    scripts/tsan.sh
  fi
done
echo "serve_under_load: all rounds passed" >&2
