#!/usr/bin/env bash
# Long soak of `kev serve` (not in CI): the reliability test of tests/integration/
# test_serve_reliability.py (load + slow clients + malformed requests together, then SIGTERM under
# load) run for KEV_SOAK_SECONDS (default 1800) against build/ci/kev; prints its figures as JSON
# (also kept in KEV_SOAK_REPORT, default soak-report.json). Loopback only.
#   scripts/soak.sh            # build first: scripts/build.sh ci
set -euo pipefail
cd "$(dirname "$0")/.."
export KEV_BIN=${KEV_BIN:-$PWD/build/ci/kev}
export KEV_SOURCE_DIR=$PWD
export KEV_SOAK_SECONDS=${KEV_SOAK_SECONDS:-1800}
export KEV_SOAK_REPORT=${KEV_SOAK_REPORT:-$PWD/soak-report.json}
[ -x "$KEV_BIN" ] || { echo "soak: $KEV_BIN not built (scripts/build.sh ci)" >&2; exit 2; }
timeout $((${KEV_SOAK_SECONDS%.*} + 600)) /usr/bin/python3 -m pytest -q -s -p no:cacheprovider \
  tests/integration/test_serve_reliability.py
cat "$KEV_SOAK_REPORT"
