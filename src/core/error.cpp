#include "kev/core/error.h"

#include <cstddef>
#include <iterator>

namespace kev {
namespace {

// What each kind means to a caller of the CLI and of the server, one row a kind in the enum's
// order (checked below, so a new kind cannot be left out).
struct KindFacts {
  ErrorKind kind;
  const char* name;
  int exit_code;
  int http_status;
};
constexpr KindFacts kKinds[] = {
    {ErrorKind::kBadInput, "bad input", 2, 422},
    {ErrorKind::kIntegrity, "integrity", 3, 500},
    {ErrorKind::kIo, "io", 4, 500},
    {ErrorKind::kUnsupported, "unsupported", 5, 422},
    {ErrorKind::kOverload, "overload", 6, 503},
    {ErrorKind::kInterrupted, "interrupted", 130, 503},
    {ErrorKind::kInternal, "internal", 70, 500},
};
constexpr bool rows_in_enum_order() {
  for (std::size_t i = 0; i < std::size(kKinds); ++i)
    if (static_cast<std::size_t>(kKinds[i].kind) != i) return false;
  return std::size(kKinds) == static_cast<std::size_t>(ErrorKind::kInternal) + 1;
}
static_assert(rows_in_enum_order(), "kKinds needs one row per ErrorKind, in the enum's order");

// A value outside the enum (a cast gone wrong) reads as internal.
const KindFacts& facts(ErrorKind kind) {
  const auto i = static_cast<std::size_t>(kind);
  return i < std::size(kKinds) ? kKinds[i] : kKinds[std::size(kKinds) - 1];
}

}  // namespace

int exit_code(ErrorKind kind) {
  return facts(kind).exit_code;
}

int http_status(ErrorKind kind) {
  return facts(kind).http_status;
}

const char* kind_name(ErrorKind kind) {
  return facts(kind).name;
}

}  // namespace kev
