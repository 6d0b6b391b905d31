#!/usr/bin/env bash
# ARM64 without ARM hardware: cross-builds kev for aarch64 (cmake --preset aarch64, the toolchain
# file cmake/aarch64-linux-gnu.cmake) and runs it under qemu-aarch64-static:
#   1. the unit tests of every kernel family's layer (core, model, head, export), at the best
#      level (neon) and again with KEV_ISA=portable;
#   2. one end-to-end pipeline on both architectures from the same inputs (scripts/cross_arch.sh):
#      export bundle bytes (the merge), `kev forward` hidden states (the model GEMMs, int8 GEMM
#      and vector kernels, both GDN forms) and `kev score` answers (the pointer head), at each
#      level of each architecture: byte for byte within an architecture and for the bundle across
#      them; hidden states and probabilities across them within bounds (libm differs).
# Needs build/ci/kev (the x86-64 build of scripts/test.sh) and what scripts/setup.sh installs.
#   KEV_AARCH64_JOBS (default nproc) sets the build's parallelism.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
sysroot=/usr/aarch64-linux-gnu

echo "== aarch64: cross-build (kev + the kernel layers' unit tests)" >&2
cmake --preset aarch64 >/dev/null
cmake --build build/aarch64 -j "${KEV_AARCH64_JOBS:-$(nproc)}" \
  --target kev test_core test_model test_head test_export

file build/aarch64/kev | grep -q 'ARM aarch64' || { echo "build/aarch64/kev is not an aarch64 binary" >&2; exit 1; }
# The emulated binary: what the Python tests and the cross-architecture check run as kev.
wrapper=$root/build/aarch64/kev-qemu
printf '#!/bin/sh\nexec qemu-aarch64-static -L %s %s "$@"\n' "$sysroot" "$root/build/aarch64/kev" >"$wrapper"
chmod +x "$wrapper"
echo "aarch64 cpu (emulated): $("$wrapper" cpu)" >&2

# qemu-aarch64 7.2 (Debian 12) never returns from pthread_create here (the guest spins before
# its clone syscall; seen with every -cpu model), so everything emulated runs on one thread
# (KEV_THREADS=1: parallel_for then starts no thread) and the unit tests that ask for several
# threads themselves are left out under emulation (they run natively on x86-64 above). The
# end-to-end comparison below covers the NEON GEMM and the rest on real model shapes.
export KEV_THREADS=1
needs_threads='Threads\.|BatchEqualsOneAtATime|\.Gemm\.|GemmAvx512Int8\.(Emulated|Extreme)|GemmAvx512Bf16\.(Packed|Emulated)|GemmInt8\.(Close|Bitwise)|RunRows\.MixedPrefixes|Continue\.'

# Unit tests (ctest runs them through CMAKE_CROSSCOMPILING_EMULATOR).
for isa in "" portable; do
  echo "== aarch64: unit tests${isa:+ with KEV_ISA=$isa}" >&2
  KEV_ISA=$isa ctest --test-dir build/aarch64 --output-on-failure -j "$(nproc)" --timeout 120 \
    -R '^(core|model|head|export)\.' -E "$needs_threads"
done

echo "== aarch64 vs x86-64: the same pipeline (bundles byte for byte, model outputs within bounds)" >&2
scripts/cross_arch.sh "$root/build/ci/kev" "$wrapper"
echo "test_aarch64.sh: all checks passed" >&2
