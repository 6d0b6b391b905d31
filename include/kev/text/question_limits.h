// The size of a Kev question, a fact of Kev's record format (docs/reference.md): each question
// has 1..kMaxOptions ordered options. The one definition: the API mapping (text/api.h) refuses a
// request with more, and the pointer head (head/pointer_head.h) scores at most that many.
#pragma once
#include <cstddef>

namespace kev {

inline constexpr size_t kMaxOptions = 255;

}  // namespace kev
