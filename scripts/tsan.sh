#!/usr/bin/env bash
# ThreadSanitizer run of the serving layer (build/tsan, the `tsan` preset): the Admission and
# framing unit tests, then the serve tests that drive the server's four kinds of threads (I/O,
# workers, sweeper, log) through batching, cancellation (reset clients), drain and overload,
# against the TSan-built kev. Every report of every process goes to a file; any report fails.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$(pwd)
reports=$(mktemp -d)
export TSAN_OPTIONS="log_path=$reports/tsan halt_on_error=0 second_deadlock_stack=1"
echo "tsan: unit (Admission, HttpFraming)" >&2
build/tsan/tests/test_serve --gtest_filter='Admission*:HttpFraming*' >/dev/null
echo "tsan: serve tests (batching, cancellation, drain, overload)" >&2
# Fewer workers than the full suite would let tests time out; these are the ones with threads
# racing: batches of concurrent clients, permute alone, reset clients mid-queue and mid-score,
# FIFO deadlines, overload 503s, SIGTERM drain, the hostile draining case, and growing states
# (saved points shared between batched conversations, eviction while they are in use), and
# admission's fairness (pipeliners beside normal clients, displacement) and memory waits.
(cd build/tsan && KEV_BIN="$root/build/tsan/kev" KEV_SOURCE_DIR="$root" PYTHONDONTWRITEBYTECODE=1 \
  /usr/bin/python3 -m pytest -q -p no:cacheprovider \
  "$root/tests/integration/test_serve_batching.py" \
  "$root/tests/integration/test_serve.py::test_overload_answers_503_and_loses_nothing" \
  "$root/tests/integration/test_lifecycle.py" \
  "$root/tests/integration/test_serve_hostile.py" \
  "$root/tests/integration/test_serve_growing.py" \
  "$root/tests/integration/test_serve_admission.py" -k \
  "batch or permute or overload or lifecycle or sigterm or drain or reset_client or fifo_admission or interleaved or eviction or pipeliners_do_not or displaced or queues_then")
if compgen -G "$reports/tsan*" >/dev/null; then
  cat "$reports"/tsan* >&2
  echo "tsan: data races reported (above)" >&2
  exit 1
fi
rm -rf "$reports"
echo "tsan: clean" >&2
