// The strict JSON reader: text -> OrderedJson (keys in document order), refusing what a lenient
// reader would silently accept. Used for every request body (request_decoder.h), manifests and
// the embedded OpenAPI document.
//
// Contract: parse_json_strict throws Error(kBadInput) naming `what` for text that is not JSON (with
// the byte offset and the reason: truncated, ill-formed UTF-8, NaN / Infinity; a number beyond
// the range of a double, such as 1e999, is named as such, not as bad syntax), a
// duplicate key in any object (Python would keep the last one), more keys in one object or
// elements in one array than JsonLimits allows, or nesting deeper than max_depth. Time is linear
// in the text whatever the limits (values are built from SAX events; duplicate keys found with
// a hash set per open object), and memory is bounded by the text's size. Thread-safe (no state).
#pragma once
#include <cstddef>
#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>

namespace kev {

using OrderedJson = nlohmann::ordered_json;

inline constexpr int kMaxJsonDepth = 64;  // default: request bodies nested deeper are refused
inline constexpr int kMaxJsonDepthLimit = 1024;  // the most a server may allow (render recurses)

// Bounds on one JSON value's containers (a server's defence; unlimited by default). Parsing
// is linear in the text whatever they are.
struct JsonLimits {
  size_t max_object_keys = SIZE_MAX;     // keys of any one object
  size_t max_array_elements = SIZE_MAX;  // elements of any one array
  size_t max_depth = kMaxJsonDepth;      // nesting levels, 1..kMaxJsonDepthLimit
};

OrderedJson parse_json_strict(std::string_view text, std::string_view what,
                              const JsonLimits& limits = {});

// A value for an error message: its dump (invalid UTF-8 replaced), cut to 80 characters + "...";
// a value nesting containers more than two deep is named by its type ("array", "object"), since
// dump() recurses and a deeply nested value would overflow the stack.
std::string shown_json(const nlohmann::json& v);

// The reason in a JSON library parse error's message (what()), without its "[json.exception...]
// parse error at line 1, column 5: " prefix and "; last read" suffix, printable ASCII only ('?'
// for any other byte), at most 160 characters: safe to quote back to a client.
std::string json_error_reason(std::string_view what);

}  // namespace kev
