// UTF-8 helpers for the text layer.
// Contract: validate_utf8 accepts exactly well-formed UTF-8 (no overlongs, no surrogates, nothing
// above U+10FFFF) and otherwise throws Error(kBadInput) naming `what` and the byte offset.
// decode_lossy turns arbitrary bytes into valid UTF-8, replacing each maximal ill-formed
// subsequence by U+FFFD (the WHATWG / Rust from_utf8_lossy rule). nfc() returns the NFC form of
// valid UTF-8 (utf8proc); ASCII input is returned unchanged without a copy of the algorithm.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace kev {

// Offset of the first ill-formed byte, or s.size() when s is well-formed UTF-8.
size_t utf8_error_offset(std::string_view s);
void validate_utf8(std::string_view s, std::string_view what);
std::string decode_lossy(std::string_view bytes);
std::string nfc(std::string_view valid_utf8);
void append_utf8(std::string& out, uint32_t cp);
// Decodes one code point of valid UTF-8 at s[i]; advances i.
uint32_t next_code_point(std::string_view s, size_t& i);
// Python's str.isspace() / str.lstrip() whitespace set (used by the API's text rendering).
bool is_python_space(uint32_t cp);
// Unicode White_Space (Rust char::is_whitespace; used for added-token lstrip/rstrip).
bool is_unicode_white_space(uint32_t cp);

}  // namespace kev
