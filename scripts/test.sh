#!/usr/bin/env bash
# The test suite, from a fresh Debian 12 machine (the README's test command; .ci/run calls it):
# installs dependencies, builds with warnings as errors, checks formatting, runs unit +
# integration + oracle tests (ctest), the ISA matrix, the one-definition check, a CPU family from
# its folder alone, the aarch64 cross-build under qemu (scripts/test_aarch64.sh), the serving
# layer's threaded tests under ThreadSanitizer (scripts/tsan.sh) and every fuzz target briefly
# under ASan/UBSan. Each stage prints its wall time; a table of them ends the run (failed or not).
#
# Two depths (docs/testing.md says which changes need the full one):
#   scripts/test.sh          every code path at every level that can differ, each proven once:
#                            what CI runs (about 30 minutes on 2 cores);
#   scripts/test.sh --full   the full matrix: also every kernel-sensitive Python test again at
#                            each forced ISA level, every kernel layer's unit tests under qemu at
#                            both aarch64 levels, the whole serving suite under ThreadSanitizer,
#                            the wide model in the aarch64 byte comparison, and 60 s per fuzz
#                            target (KEV_FULL_MATRIX=1 does the same).
# Stages can be left out:
#   KEV_FUZZ_SECONDS (default 20, --full 60) sets the per-target fuzz time; 0 skips fuzzing.
#   KEV_AARCH64=0, KEV_TSAN=0, KEV_FAMILY_DEMO=0, KEV_ODR=0 skip those stages.
#   KEV_PACKAGE_TEST=1 also builds the Debian package and installs, runs and purges it in a clean
#   Debian root (scripts/test_package.sh; off by default: ~10 minutes and the archive's network).
set -euo pipefail
cd "$(dirname "$0")/.."

full=${KEV_FULL_MATRIX:-0}
case "${1:-}" in
  --full) full=1 ;;
  "") ;;
  *) echo "usage: scripts/test.sh [--full]" >&2; exit 2 ;;
esac
export KEV_FULL_MATRIX=$full

# ---- stage timing: stage NAME FUNCTION runs one stage and records its wall time; the table is
# printed when the script exits, with the stage that failed (if one did) marked.
stage_names=() stage_times=()
current_stage="" current_start=0 run_start=$SECONDS
minutes() { printf '%d:%02d' $(($1 / 60)) $(($1 % 60)); }
stage() {
  current_stage=$1 current_start=$SECONDS
  echo "== $1" >&2
  "$2"
  stage_names+=("$1") stage_times+=("$(minutes $((SECONDS - current_start)))")
  echo "== $1: done in $(minutes $((SECONDS - current_start)))" >&2
  current_stage=""
}
skip() { stage_names+=("$1") stage_times+=("skipped ($2)"); }
report() {
  local rc=$? i
  {
    echo
    echo "stage                                              wall (m:ss)"
    for i in "${!stage_names[@]}"; do
      printf '  %-48s %s\n' "${stage_names[$i]}" "${stage_times[$i]}"
    done
    [ -z "$current_stage" ] ||
      printf '  %-48s FAILED after %s\n' "$current_stage" "$(minutes $((SECONDS - current_start)))"
    printf '  %-48s %s%s\n' "total" "$(minutes $((SECONDS - run_start)))" \
      "$([ "$full" = 1 ] && echo ' (full matrix)')"
  } >&2
  return "$rc"
}
trap report EXIT

# ---- the stages
setup() { scripts/setup.sh; }

build() { scripts/build.sh ci; }

format_check() {
  local sources
  mapfile -t sources < <(git ls-files '*.cpp' '*.h')
  if ((${#sources[@]})); then clang-format --dry-run --Werror "${sources[@]}"; fi
}

# Runs ctest with the given extra arguments; adds the number of tests it ran to $total.
total=0
run_ctest() {
  local log
  log=$(mktemp)
  ctest --test-dir build/ci --output-on-failure -j "$(nproc)" "$@" | tee "$log"
  total=$((total + $(sed -n 's/.*tests failed out of \([0-9]*\).*/\1/p' "$log" | tail -1)))
  rm -f "$log"
}

tests() {
  echo "cpu: $(build/ci/kev cpu)" >&2
  run_ctest
}

# The ISA matrix (docs/cpus.md): every kernel forced to each level below this CPU's best, so an
# AVX-512 machine also runs the AVX2 code and every machine the portable code. At each level:
#   - the unit tests (every kernel against its float64 or scalar oracle, every layer above);
#   - the kernel-sensitive Python tests (label cpu-kernels) but the two whose cost is their size
#     (oracle.test_precision: 600 questions in three modes; oracle.test_score: its torch scorer);
#     --full runs them too;
#   - scripts/cross_arch.sh with this binary alone: export bytes, hidden states (fp32 both GDN
#     forms, int8, bf16) of a tiny and of a 0.8B-wide model, and answers (fp32, int8) at every
#     level byte for byte equal to the best level's, whose outputs the oracle tests hold: what
#     test_precision and test_score assert at the best level then holds at every level.
isa_matrix() {
  local best isa exclude=()
  best=$(build/ci/kev cpu | sed -n 's/.*"gemm":"\([a-z0-9]*\)".*/\1/p')
  [ "$full" = 1 ] || exclude=(-E '^oracle\.(test_precision|test_score)$')
  for isa in avx2 portable; do
    if [ "$isa" = "$best" ] || { [ "$isa" = avx2 ] && [ "$best" = portable ]; }; then continue; fi
    echo "== tests with KEV_ISA=$isa (this CPU's best: $best)" >&2
    KEV_ISA=$isa run_ctest -L 'unit|cpu-kernels' "${exclude[@]}"
  done
  echo "== every level of this binary, byte for byte (scripts/cross_arch.sh)" >&2
  KEV_CROSS_WIDE=1 scripts/cross_arch.sh "$PWD/build/ci/kev"
}

# Two definitions of one name in different files (a struct of the same name and namespace with
# another layout, a function declared with other types) are errors here; the generated
# all_public_headers.cpp of the tests only sees the public headers, this sees every source.
odr_check() {
  cmake --preset odr >/dev/null
  cmake --build build/odr -j "$(nproc)" --target kev
}

# A CPU family is one folder: the build with tests/cpu_family/demo/ in place of this machine's
# family (a level "demo", no kernel variants) must show its level and extension in `kev cpu`,
# take KEV_ISA=demo, and pass the kernel layer's unit tests at every level. Its flags are the ci
# preset's, so every layer but the kernel layer comes from ccache.
family_demo() {
  local report want isa
  cmake --preset family-demo >/dev/null
  cmake --build build/family-demo -j "$(nproc)" --target kev test_cpu
  report=$(KEV_ISA=demo build/family-demo/kev cpu)
  echo "kev cpu (demo family): $report" >&2
  for want in '"arch":"demo"' '"demo":true' '"demo_ext":false'; do
    if [[ "$report" != *"$want"* ]]; then
      echo "test.sh: the demo family's kev cpu lacks $want" >&2
      return 1
    fi
  done
  for isa in demo portable; do
    KEV_ISA=$isa build/family-demo/tests/test_cpu --gtest_brief=1
  done
  # This build, like a release build, lacks KEV_TEST_HOOKS: its kev must not hold the name of any
  # test-only knob (kev/core/test_hooks.h), which the ci build's kev holds (so the search works).
  local knob
  for knob in KEV_FAULT_WRITE_AFTER_BYTES KEV_AVX512_EMULATE; do
    if ! grep -qa "$knob" build/ci/kev || grep -qa "$knob" build/family-demo/kev; then
      echo "test.sh: $knob: expected in build/ci/kev (test hooks) and absent from build/family-demo/kev" >&2
      return 1
    fi
  done
}

# ARM64 under qemu (scripts/test_aarch64.sh): cross-build, the kernel layers' unit tests at
# neon and portable, and the end-to-end pipeline against this machine's build.
aarch64() { scripts/test_aarch64.sh; }

tsan() {
  cmake --preset tsan >/dev/null
  cmake --build build/tsan -j "$(nproc)" --target kev test_serve
  scripts/tsan.sh
}

package_test() { scripts/test_package.sh; }

fuzz_seconds=${KEV_FUZZ_SECONDS:-$([ "$full" = 1 ] && echo 60 || echo 20)}
fuzz() {
  local targets
  cmake --preset fuzz >/dev/null
  mapfile -t targets < <(ls tests/fuzz/fuzz_*.cpp | xargs -n1 basename | sed 's/\.cpp$//')
  cmake --build build/fuzz -j "$(nproc)" --target "${targets[@]}"
  scripts/fuzz.sh "$fuzz_seconds"
}

# ---- the run
stage "setup (scripts/setup.sh)" setup
stage "build, ci preset (warnings are errors)" build
stage "format check" format_check
stage "tests (ctest, this CPU's best kernels)" tests
stage "ISA matrix (forced lower levels)" isa_matrix
if [ "${KEV_ODR:-1}" != 0 ]; then stage "one-definition check (odr preset)" odr_check
else skip "one-definition check (odr preset)" KEV_ODR=0; fi
if [ "${KEV_FAMILY_DEMO:-1}" != 0 ]; then stage "CPU family from its folder (family-demo)" family_demo
else skip "CPU family from its folder (family-demo)" KEV_FAMILY_DEMO=0; fi
if [ "${KEV_AARCH64:-1}" != 0 ]; then stage "aarch64 (cross-built, under qemu)" aarch64
else skip "aarch64 (cross-built, under qemu)" KEV_AARCH64=0; fi
if [ "${KEV_TSAN:-1}" != 0 ]; then stage "ThreadSanitizer (serve)" tsan
else skip "ThreadSanitizer (serve)" KEV_TSAN=0; fi
if [ "${KEV_PACKAGE_TEST:-0}" = 1 ]; then stage "Debian package (scripts/test_package.sh)" package_test; fi
if [ "$fuzz_seconds" != 0 ] && ls tests/fuzz/fuzz_*.cpp >/dev/null 2>&1; then
  stage "fuzz smoke (${fuzz_seconds}s per target, ASan+UBSan)" fuzz
else skip "fuzz smoke" KEV_FUZZ_SECONDS=0; fi
echo "test.sh: all checks passed" >&2
echo "tests: ${total:-0} passed, 0 failed"
