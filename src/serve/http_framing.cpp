// HTTP/1.1 framing checks (kev/serve/http_framing.h).
#include "kev/serve/http_framing.h"

#include <fmt/format.h>
#include <boost/beast/core/string.hpp>

namespace kev {

namespace beast = boost::beast;
namespace http = beast::http;

namespace {

FramingRefusal refuse(int status, std::string message) {
  return FramingRefusal{status, std::move(message)};
}

}  // namespace

std::string printable(std::string_view s, size_t max) {
  std::string out;
  for (unsigned char c : s.substr(0, max)) {
    if (c > 0x20 && c < 0x7f && c != '%' && c != '"' && c != '\\') {
      out += static_cast<char>(c);
    } else {
      out += fmt::format("%{:02X}", c);
    }
  }
  if (s.size() > max) out += "...";
  return out;
}

bool printable_ascii(std::string_view s) {
  for (unsigned char c : s)
    if (c < 0x20 || c > 0x7e) return false;
  return true;
}

bool iequals(std::string_view a, std::string_view b) {
  return beast::iequals(beast::string_view(a.data(), a.size()),
                        beast::string_view(b.data(), b.size()));
}

std::string_view trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t')) s.remove_suffix(1);
  return s;
}

std::optional<std::string_view> target_path(std::string_view target) {
  if (target.empty()) return std::nullopt;
  if (target[0] != '/') {
    const size_t scheme = target.find("://");
    if (scheme == std::string_view::npos ||
        !(iequals(target.substr(0, scheme), "http") || iequals(target.substr(0, scheme), "https")))
      return std::nullopt;
    target.remove_prefix(scheme + 3);
    const size_t end = target.find_first_of("/?#");
    if (end == 0) return std::nullopt;  // no authority
    if (end == std::string_view::npos || target[end] != '/') return std::string_view("/");
    target.remove_prefix(end);
  }
  return target.substr(0, target.find('?'));
}

// A line of a complete header section that starts with a space or tab (after the request
// line: Beast itself refuses one right after it).
bool has_obs_fold(std::string_view header) {
  for (size_t i = header.find("\r\n"); i != std::string_view::npos && i + 2 < header.size();
       i = header.find("\r\n", i + 2))
    if (header[i + 2] == ' ' || header[i + 2] == '\t') return true;
  return false;
}

// What RFC 9112 leaves to the recipient and Beast lets through: refused before any body byte
// is read, and the connection is closed since its framing is in doubt.
std::optional<FramingRefusal> check_header(const http::request_header<>& req,
                                           std::optional<uint64_t> content_length,
                                           const FramingLimits& limits) {
  if (req.version() != 11 && req.version() != 10)
    return refuse(505, "only HTTP/1.0 and HTTP/1.1 are served");
  size_t fields = 0, hosts = 0, lengths = 0, codings = 0;
  for (const auto& f : req) {
    ++fields;
    if (f.name() == http::field::host) ++hosts;
    if (f.name() == http::field::content_length) ++lengths;
    if (f.name() == http::field::transfer_encoding) ++codings;
  }
  if (fields > limits.max_headers)
    return refuse(431,
                  fmt::format("the request has more than {} header fields", limits.max_headers));
  if (req.version() == 11 && hosts != 1)
    return refuse(400, "an HTTP/1.1 request needs exactly one Host header");
  if (lengths > 1) return refuse(400, "more than one Content-Length header");
  if (lengths == 1) {
    // Beast takes "73, 73" (a list of equal values, which RFC 9110 8.6 lets a recipient
    // collapse) as 73; a proxy in front may not, so only plain digits are accepted.
    auto cl = req[http::field::content_length];
    const std::string_view v = trim(std::string_view(cl.data(), cl.size()));
    if (v.empty() || v.find_first_not_of("0123456789") != std::string_view::npos)
      return refuse(400, "Content-Length must be one decimal number");
  }
  if (codings > 0) {
    // Beast frames the body by chunked only when it is the last coding, and reads any other
    // value as "no body": a smuggling vector behind proxies that disagree. Only plain
    // "chunked" (HTTP/1.1) is accepted.
    auto te = req[http::field::transfer_encoding];
    if (codings > 1 || req.version() != 11 ||
        !iequals(trim(std::string_view(te.data(), te.size())), "chunked"))
      return refuse(400, "Transfer-Encoding other than a single \"chunked\" is not accepted");
  }
  if (auto ce = req.find(http::field::content_encoding); ce != req.end()) {
    // A compressed body's size says nothing of its decoded size: refused, not inflated.
    return refuse(415, "Content-Encoding is not accepted; send the body uncompressed");
  }
  if (auto e = req.find(http::field::expect);
      e != req.end() &&
      !iequals(trim(std::string_view(e->value().data(), e->value().size())), "100-continue"))
    return refuse(417, "only \"Expect: 100-continue\" is understood");
  if (auto len = content_length; len && *len > limits.max_body)
    return refuse(413, fmt::format("the request body is larger than {} bytes", limits.max_body));
  if (!target_path(std::string_view(req.target().data(), req.target().size())))
    return refuse(400, "the request target must be a path starting with / or an http URI");
  return std::nullopt;
}

}  // namespace kev
