// The test-only knobs (kev/core/test_hooks.h). Compiled alone (outside the core layer's unity
// build) with KEV_TEST_HOOKS=1 only where the build asks for them, so a build that does not
// differs from one that does in this one object.
#include "kev/core/test_hooks.h"

#include <cstdlib>
#include <cstring>

namespace kev::test_hooks {

#if defined(KEV_TEST_HOOKS) && KEV_TEST_HOOKS

bool enabled() {
  return true;
}

std::optional<uint64_t> write_fault_budget() {
  const char* v = std::getenv("KEV_FAULT_WRITE_AFTER_BYTES");
  if (v == nullptr) return std::nullopt;
  return std::strtoull(v, nullptr, 10);
}

bool avx512_emulation() {
  const char* v = std::getenv("KEV_AVX512_EMULATE");
  return v != nullptr && std::strcmp(v, "1") == 0;
}

bool pin_depth_prefix() {
  const char* v = std::getenv("KEV_PIN_DEPTH_PREFIX");
  return v != nullptr && std::strcmp(v, "1") == 0;
}

#else

bool enabled() {
  return false;
}
std::optional<uint64_t> write_fault_budget() {
  return std::nullopt;
}
bool avx512_emulation() {
  return false;
}
bool pin_depth_prefix() {
  return false;
}

#endif

}  // namespace kev::test_hooks
