// Request ids: the one place a request's id is chosen, for the request log and for any header
// that echoes it (x-typesafe-request-id, as the upstream Kev server sends).
#pragma once
#include <string>
#include <string_view>

namespace kev {

// The HTTP header a client may send its own request id in.
inline constexpr const char* kRequestIdHeader = "x-typesafe-request-id";

// A new id: a random (version 4) UUID as 32 lowercase hex digits, like Python's uuid4().hex.
std::string new_request_id();

// The client's id when it is 1..128 printable ASCII characters (0x20..0x7e), so that it can be
// echoed in a header and logged as it is; otherwise (absent, empty, too long, other bytes) a
// new_request_id().
std::string request_id(std::string_view header_value);

}  // namespace kev
