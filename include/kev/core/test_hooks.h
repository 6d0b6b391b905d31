// The test-only knobs of the environment: read only by a build configured with
// KEV_TEST_HOOKS=ON (the ci, aarch64, debug-asan, tsan and odr presets, which run the tests that
// need them). Any other build (the release preset, the Debian packages, the Python module)
// ignores these variables, and its binary does not even hold their names, so a stray variable on
// a production host changes nothing. docs/environment.md lists them.
#pragma once
#include <cstdint>
#include <optional>

namespace kev::test_hooks {

// True in a build that honours the knobs.
bool enabled();
// KEV_FAULT_WRITE_AFTER_BYTES=N: the byte budget after which writes fail (core/file.h's
// WriteFaults); nullopt when unset or the build ignores it.
std::optional<uint64_t> write_fault_budget();
// KEV_AVX512_EMULATE=1: the kernel layer runs the emulated AVX-512 kernels for int8 and bf16
// (src/cpu/levels.h says when); false when unset, another value, or the build ignores it.
bool avx512_emulation();
// KEV_PIN_DEPTH_PREFIX=1: `kev pin` / `kev export` of a full-weight checkpoint accept a config
// whose layers are the first N of the member's (N a multiple of 4), so a prefix of a member too
// large for the test machine can be exported at its real dimensions and measured (the Kev-27B
// memory figures of docs/performance.md); false when unset, another value, or ignored.
bool pin_depth_prefix();

}  // namespace kev::test_hooks
