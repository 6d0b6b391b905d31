// HTTP/1.1 framing checks: what RFC 9112 leaves to the recipient and Boost.Beast lets through,
// decided on a parsed request header before any body byte is read. Beast parses; these functions
// refuse what a proxy in front might frame differently (request smuggling) or what the server
// will not take (compressed bodies, unknown expectations, oversized declarations).
//
// Every refusal is {status, sentence}: the server answers it as {"detail": sentence} and closes
// the connection, since the framing of whatever follows is in doubt. Sentences never echo client
// bytes. Pure functions over their arguments: no allocation beyond the result, thread-safe, and
// safe on any input (fuzzed by tests/fuzz/fuzz_http_framing.cpp).
#pragma once
#include <boost/beast/http/message.hpp>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace kev {

struct FramingRefusal {
  int status = 400;     // 400, 413, 415, 417, 431 or 505
  std::string message;  // the {"detail"} sentence
};

// The limits the checks apply (ServeOptions max_headers and max_body).
struct FramingLimits {
  size_t max_headers = 100;
  size_t max_body = size_t{4} << 20;
};

// A complete request header: nullopt when it may be served, else why not. content_length is the
// parser's (Beast's) reading of it; refused in this order: version other than 1.0/1.1 (505),
// more than max_headers fields (431), HTTP/1.1 without exactly one Host, several Content-Length,
// a Content-Length other than plain digits, a Transfer-Encoding other than one plain "chunked"
// on HTTP/1.1 (400), any Content-Encoding (415), an Expect other than 100-continue (417), a
// declared body over max_body (413), a target that is neither origin- nor absolute-form (400).
std::optional<FramingRefusal> check_header(const boost::beast::http::request_header<>& req,
                                           std::optional<uint64_t> content_length,
                                           const FramingLimits& limits);

// The path of a request target without its query: origin-form ("/p?q") as is, absolute-form
// ("http://host/p?q", which RFC 9112 3.2.2 says a server MUST accept) from its path ("/" when
// empty). nullopt for any other form (authority-form of CONNECT, asterisk-form "*", garbage).
std::optional<std::string_view> target_path(std::string_view target);

// A complete header section (request line first) with a line that starts with a space or tab:
// obs-fold (RFC 9112 5.2), which Beast silently unfolds and a front proxy may read differently.
bool has_obs_fold(std::string_view header);

// Raw request bytes as printable ASCII (others, '%', '"' and '\\' as %XX; at most `max` bytes,
// then "..."), so that neither a log line nor a JSON string in a reply can be forged or made
// invalid UTF-8 by what a client sent.
std::string printable(std::string_view s, size_t max = 256);
// Every byte is 0x20..0x7e.
bool printable_ascii(std::string_view s);
// ASCII case-insensitive equality; s without leading and trailing spaces and tabs.
bool iequals(std::string_view a, std::string_view b);
std::string_view trim(std::string_view s);

}  // namespace kev
