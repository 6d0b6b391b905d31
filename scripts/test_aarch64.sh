#!/usr/bin/env bash
# ARM64 without ARM hardware: cross-builds kev for aarch64 (cmake --preset aarch64, the toolchain
# file cmake/aarch64-linux-gnu.cmake) and runs it under qemu-aarch64-static:
#   1. the unit tests of the kernel layer (cpu) and of the layers that call it (core, model,
#      head) at the best level (neon), and those of the kernel layer (cpu, head) again with
#      KEV_ISA=portable;
#   2. one end-to-end pipeline on both architectures from the same inputs (scripts/cross_arch.sh):
#      export bundle bytes (the merge), `kev forward` hidden states (the model GEMMs, int8 GEMM
#      and vector kernels, both GDN forms) and `kev score` answers (the pointer head), at each
#      level of each architecture: byte for byte within an architecture and across them (the
#      model's transcendentals are its own, include/kev/core/fixed_math.h, not libm's).
# KEV_FULL_MATRIX=1 (scripts/test.sh --full) adds the export layer's unit tests and the model
# layer's continuation tests (model.Continue.*, two minutes under qemu) at neon, and the
# 0.8B-wide model to the byte comparison (KEV_CROSS_WIDE); by default their proof on aarch64 is
# the comparison itself (the bundle bytes of the export, the prefix-then-rows hidden states of the
# forward, equal to x86-64's, where both tests run at every level) and the kernel layer's
# neon tests (the merge; a row's bits independent of its batch).
# Needs build/ci/kev (the x86-64 build of scripts/test.sh) and what scripts/setup.sh installs.
#   KEV_AARCH64_JOBS (default nproc) sets the build's parallelism.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
start=$SECONDS

echo "== aarch64: cross-build (kev + the kernel layers' unit tests)" >&2
cmake --preset aarch64 >/dev/null
full=${KEV_FULL_MATRIX:-0}
targets=(kev test_core test_cpu test_model test_head)
[ "$full" != 1 ] || targets+=(test_export)
cmake --build build/aarch64 -j "${KEV_AARCH64_JOBS:-$(nproc)}" --target "${targets[@]}"

file build/aarch64/kev | grep -q 'ARM aarch64' || { echo "build/aarch64/kev is not an aarch64 binary" >&2; exit 1; }
# The emulated binary: what the Python tests and the cross-architecture check run as kev.
wrapper=$root/build/aarch64/kev-qemu
# -L /: the multiarch arm64 libc (libc6:arm64), as cmake/aarch64-linux-gnu.cmake says why.
printf '#!/bin/sh\nexec qemu-aarch64-static -L / %s "$@"\n' "$root/build/aarch64/kev" >"$wrapper"
chmod +x "$wrapper"
echo "aarch64 cpu (emulated): $("$wrapper" cpu)" >&2

# Unit tests (ctest runs them through CMAKE_CROSSCOMPILING_EMULATOR), the thread-starting ones
# included: two at a time (the emulated tests are CPU-bound; more only queue).
echo "aarch64: cross-build done after $((SECONDS - start)) s" >&2
for isa in "" portable; do
  # With KEV_ISA=portable only the kernel layer (cpu, head): the layers above call the same
  # kernels, their tests ran at neon, and cross_arch.sh runs the whole pipeline at each level.
  # (Not model.Continue nor the seam's test of a 4,096-token pass: layer-level chaining with no
  # kernel of its own, minutes under qemu.)
  filter='^(core|cpu|model|head)\.' exclude='^model\.(Continue\.|BackendSeam\.ShortStates)'
  [ "$full" != 1 ] || filter='^(core|cpu|model|head|export)\.' exclude='^$'
  [ -z "$isa" ] || filter='^(cpu|head)\.'
  echo "== aarch64: unit tests${isa:+ with KEV_ISA=$isa}" >&2
  KEV_ISA=$isa ctest --test-dir build/aarch64 --output-on-failure -j 2 --timeout 300 \
    -R "$filter" -E "$exclude"
  echo "aarch64: unit tests${isa:+ ($isa)} done after $((SECONDS - start)) s" >&2
done

echo "== aarch64 vs x86-64: the same pipeline, every output byte for byte" >&2
KEV_CROSS_WIDE=$full scripts/cross_arch.sh "$root/build/ci/kev" "$wrapper"
echo "test_aarch64.sh: all checks passed in $((SECONDS - start)) s" >&2
