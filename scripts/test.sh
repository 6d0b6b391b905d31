#!/usr/bin/env bash
# The full test suite, from a fresh Debian 12 machine: installs dependencies, builds with
# warnings as errors, runs unit + integration + oracle tests (ctest), checks formatting,
# cross-builds for aarch64 and runs its tests under qemu (scripts/test_aarch64.sh), runs the
# serving layer's threaded tests under ThreadSanitizer (scripts/tsan.sh), and runs every fuzz
# target briefly under ASan/UBSan.
#   KEV_FUZZ_SECONDS (default 20) sets the per-target fuzz smoke time; 0 skips fuzzing.
#   KEV_AARCH64=0 skips the aarch64 cross-build and its emulated tests (scripts/test_aarch64.sh).
#   KEV_TSAN=0 skips the ThreadSanitizer run.
#   KEV_FAMILY_DEMO=0 skips the build with the demo CPU family (tests/cpu_family/demo/).
#   KEV_ODR=0 skips the one-definition check (the odr preset: `kev` linked by GCC's link-time
#   optimizer with every object of every layer, -Werror=odr -Werror=lto-type-mismatch).
#   KEV_PACKAGE_TEST=1 also builds the Debian package and installs, runs and purges it in a clean
#   Debian root (scripts/test_package.sh; off by default: ~10 minutes and the archive's network).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh

echo "== build (warnings are errors)" >&2
scripts/build.sh ci

echo "== format check" >&2
mapfile -t sources < <(git ls-files '*.cpp' '*.h')
if ((${#sources[@]})); then clang-format --dry-run --Werror "${sources[@]}"; fi

# Runs ctest with the given extra arguments; adds the number of tests it ran to $total.
total=0
run_ctest() {
  local log
  log=$(mktemp)
  ctest --test-dir build/ci --output-on-failure -j "$(nproc)" "$@" | tee "$log"
  total=$((total + $(sed -n 's/.*tests failed out of \([0-9]*\).*/\1/p' "$log" | tail -1)))
  rm -f "$log"
}

echo "== tests" >&2
echo "cpu: $(build/ci/kev cpu)" >&2
run_ctest

# The ISA matrix: the tests that go through the dispatched kernels, again with every kernel
# forced to each variant below this CPU's best (docs/cpus.md), so an AVX-512 machine also runs
# the AVX2 code and every machine the portable code.
best=$(build/ci/kev cpu | sed -n 's/.*"gemm":"\([a-z0-9]*\)".*/\1/p')
for isa in avx2 portable; do
  if [ "$isa" = "$best" ] || { [ "$isa" = avx2 ] && [ "$best" = portable ]; }; then continue; fi
  echo "== tests with KEV_ISA=$isa (this CPU's best: $best)" >&2
  KEV_ISA=$isa run_ctest -L 'unit|cpu-kernels'
done

# Two definitions of one name in different files (a struct of the same name and namespace with
# another layout, a function declared with other types) are errors here; the generated
# all_public_headers.cpp of the tests only sees the public headers, this sees every source.
if [ "${KEV_ODR:-1}" != 0 ]; then
  echo "== one-definition check (GCC link-time optimizer, every object of every layer)" >&2
  cmake --preset odr >/dev/null
  cmake --build build/odr -j "$(nproc)" --target kev
fi

# A CPU family is one folder: the build with tests/cpu_family/demo/ in place of this machine's
# family (a level "demo", no kernel variants) must show its level and extension in `kev cpu`,
# take KEV_ISA=demo, and pass the kernel layer's unit tests at every level.
if [ "${KEV_FAMILY_DEMO:-1}" != 0 ]; then
  echo "== a CPU family from its folder alone (the family-demo preset)" >&2
  cmake --preset family-demo >/dev/null
  cmake --build build/family-demo -j "$(nproc)" --target kev test_cpu
  report=$(KEV_ISA=demo build/family-demo/kev cpu)
  echo "kev cpu (demo family): $report" >&2
  for want in '"arch":"demo"' '"demo":true' '"demo_ext":false'; do
    if [[ "$report" != *"$want"* ]]; then
      echo "test.sh: the demo family's kev cpu lacks $want" >&2
      exit 1
    fi
  done
  for isa in demo portable; do
    KEV_ISA=$isa build/family-demo/tests/test_cpu --gtest_brief=1
  done
fi

# ARM64 under qemu (scripts/test_aarch64.sh): cross-build, the kernel layers' unit tests at
# neon and portable, and the end-to-end pipeline against this machine's build.
if [ "${KEV_AARCH64:-1}" != 0 ]; then
  echo "== aarch64 (cross-built, run under qemu-aarch64-static)" >&2
  scripts/test_aarch64.sh
fi

if [ "${KEV_TSAN:-1}" != 0 ]; then
  echo "== ThreadSanitizer (serve: batching, cancellation, drain, overload)" >&2
  cmake --preset tsan >/dev/null
  cmake --build build/tsan -j "$(nproc)" --target kev test_serve
  scripts/tsan.sh
fi

if [ "${KEV_PACKAGE_TEST:-0}" = 1 ]; then
  echo "== Debian package: install, run, purge in a clean root (scripts/test_package.sh)" >&2
  scripts/test_package.sh
fi

fuzz_seconds=${KEV_FUZZ_SECONDS:-20}
if [ "$fuzz_seconds" != 0 ] && ls tests/fuzz/fuzz_*.cpp >/dev/null 2>&1; then
  echo "== fuzz smoke (${fuzz_seconds}s per target, ASan+UBSan)" >&2
  cmake --preset fuzz >/dev/null
  mapfile -t targets < <(ls tests/fuzz/fuzz_*.cpp | xargs -n1 basename | sed 's/\.cpp$//')
  cmake --build build/fuzz -j "$(nproc)" --target "${targets[@]}"
  scripts/fuzz.sh "$fuzz_seconds"
fi
echo "test.sh: all checks passed" >&2
echo "tests: ${total:-0} passed, 0 failed"
