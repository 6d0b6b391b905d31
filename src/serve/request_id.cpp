#include "kev/serve/request_id.h"

#include <sys/random.h>

#include <array>
#include <cstdint>
#include <random>

namespace kev {

std::string new_request_id() {
  std::array<uint8_t, 16> b{};
  size_t got = 0;
  while (got < b.size()) {
    const ssize_t n = ::getrandom(b.data() + got, b.size() - got, 0);
    if (n <= 0) break;
    got += static_cast<size_t>(n);
  }
  if (got < b.size()) {  // getrandom unavailable: an id needs to be unique, not secret
    thread_local std::mt19937_64 rng{std::random_device{}()};
    for (auto& x : b) x = static_cast<uint8_t>(rng());
  }
  b[6] = static_cast<uint8_t>((b[6] & 0x0f) | 0x40);  // version 4
  b[8] = static_cast<uint8_t>((b[8] & 0x3f) | 0x80);  // RFC 4122 variant
  static constexpr char kHex[] = "0123456789abcdef";
  std::string out(32, '0');
  for (size_t i = 0; i < b.size(); ++i) {
    out[2 * i] = kHex[b[i] >> 4];
    out[2 * i + 1] = kHex[b[i] & 15];
  }
  return out;
}

std::string request_id(std::string_view header_value) {
  bool ok = !header_value.empty() && header_value.size() <= 128;
  for (unsigned char c : header_value) ok = ok && c >= 0x20 && c < 0x7f;
  return ok ? std::string(header_value) : new_request_id();
}

}  // namespace kev
