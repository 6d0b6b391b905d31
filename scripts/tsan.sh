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
# FIFO deadlines, overload 503s (with and without a queue), SIGTERM drain (its delay, its
# deadline, the hostile draining case), growing states (saved points shared between batched
# conversations, eviction while they are in use), admission's fairness (pipeliners beside normal
# clients, displacement) and its memory waits; saved states on disk (the writer thread beside
# the workers: two servers writing one directory, files damaged while read, failing writes).
# Each once: KEV_FULL_MATRIX=1 (scripts/test.sh
# --full) adds their repeats and other parameters (growing states in int8, the pipeliners' two
# reruns) and the lifecycle and batching tests without races of their own.
t=$root/tests/integration
selected=(
  "$t/test_serve_batching.py::test_queued_batch_equals_one_at_a_time"
  "$t/test_serve_batching.py::test_permute_is_never_batched_with_other_requests"
  "$t/test_serve_batching.py::test_concurrent_clients_equal_one_at_a_time"
  "$t/test_serve.py::test_overload_answers_503_and_loses_nothing"
  "$t/test_lifecycle.py::test_sigterm_turns_not_ready_serves_through_drain_delay_then_exits_0"
  "$t/test_lifecycle.py::test_drain_delay_zero_exits_promptly"
  "$t/test_lifecycle.py::test_drain_deadline_stops_a_long_prefill_and_answers_503"
  "$t/test_serve_hostile.py::test_reset_client_work_is_not_computed"
  "$t/test_serve_hostile.py::test_reset_client_scoring_stops_after_its_prefix"
  "$t/test_serve_hostile.py::test_fifo_admission_and_queue_deadline"
  "$t/test_serve_hostile.py::test_sigterm_finishes_all_accepted"
  "$t/test_serve_hostile.py::test_draining"
  "$t/test_serve_growing.py::test_two_conversations_interleaved_and_batched[fp32]"
  "$t/test_serve_growing.py::test_eviction_mid_conversation_stays_exact[fp32]"
  "$t/test_serve_growing.py::test_permute_and_separate_on_a_grown_state[fp32]"
  "$t/test_serve_admission.py::test_non_reading_pipeliners_do_not_keep_normal_clients_out[0]"
  "$t/test_serve_admission.py::test_a_displaced_pipelined_request_is_answered_503_in_order"
  "$t/test_serve_admission.py::test_memory_budget_queues_then_refuses_503_at_the_deadline"
  "$t/test_state_dir.py::test_two_servers_writing_the_same_points"
  "$t/test_state_dir.py::test_damage_while_serving_never_gives_a_wrong_answer"
  "$t/test_state_dir.py::test_write_failures_pause_saving_and_never_fail_a_request"
)
if [ "${KEV_FULL_MATRIX:-0}" = 1 ]; then
  selected=("$t/test_serve_batching.py" "$t/test_serve.py::test_overload_answers_503_and_loses_nothing"
    "$t/test_lifecycle.py" "$t/test_serve_hostile.py" "$t/test_serve_growing.py"
    "$t/test_serve_admission.py" -k
    "batch or permute or overload or lifecycle or sigterm or drain or reset_client or fifo_admission or interleaved or eviction or pipeliners_do_not or displaced or queues_then")
fi
(cd build/tsan && KEV_BIN="$root/build/tsan/kev" KEV_SOURCE_DIR="$root" PYTHONDONTWRITEBYTECODE=1 \
  /usr/bin/python3 -m pytest -q -p no:cacheprovider --durations=5 "${selected[@]}")
if compgen -G "$reports/tsan*" >/dev/null; then
  cat "$reports"/tsan* >&2
  echo "tsan: data races reported (above)" >&2
  exit 1
fi
rm -rf "$reports"
echo "tsan: clean" >&2
