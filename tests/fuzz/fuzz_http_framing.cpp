// Fuzzes what the server does with raw request bytes before routing: Beast's request parser
// under the server's header limit, then, on a complete header, the framing checks
// (kev/serve/http_framing.h) on the header and on its raw bytes, as src/serve/connection.cpp
// does. Invariants: nothing crashes or reads out of bounds; a refusal has a status the server
// documents and a sentence that is printable ASCII (it never echoes client bytes); a header
// that passes has a target with a path starting with '/', and printable() of anything is
// printable ASCII.
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/http.hpp>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <optional>
#include <string_view>

#include "kev/serve/http_framing.h"

namespace {

namespace http = boost::beast::http;

void require(bool ok) {
  if (!ok) std::abort();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view bytes(reinterpret_cast<const char*>(data), size);
  require(kev::printable_ascii(kev::printable(bytes)));
  kev::has_obs_fold(bytes);
  if (auto path = kev::target_path(bytes)) require(!path->empty() && path->front() == '/');

  http::request_parser<http::string_body> parser;
  parser.header_limit(16384);
  parser.body_limit(1 << 16);
  boost::beast::error_code ec;
  const size_t used = parser.put(boost::asio::buffer(data, size), ec);
  if (ec || !parser.is_header_done()) return 0;
  // Beast consumes a header only once all of it is in: these are exactly its bytes.
  kev::has_obs_fold(bytes.substr(0, used));
  const auto& req = parser.get();
  const auto length = parser.content_length();
  const auto refusal =
      kev::check_header(req, length ? std::optional<uint64_t>(*length) : std::nullopt,
                        kev::FramingLimits{.max_headers = 100, .max_body = 4096});
  if (refusal) {
    const int s = refusal->status;
    require(s == 400 || s == 413 || s == 415 || s == 417 || s == 431 || s == 505);
    require(!refusal->message.empty() && kev::printable_ascii(refusal->message));
  } else {
    const std::string_view target(req.target().data(), req.target().size());
    const auto path = kev::target_path(target);
    require(path && !path->empty() && path->front() == '/');
    require(req.version() == 10 || req.version() == 11);
    require(!length || *length <= 4096);
  }
  return 0;
}
