// Fuzzes the request decoder (kev/text/request_decoder.h), the one path from an untrusted body to
// a request for both `kev serve` and `kev score`. The first byte picks the options (bit 0: date
// facts; bit 1: small JSON bounds; bit 2: the permute body form); the rest is the body.
// Invariants: nothing crashes, hangs or escapes as an exception; a refusal is 400 exactly when
// the body is not JSON, else 422, with a non-empty sentence that serializes as the server's
// {"detail"} reply (valid UTF-8); an accepted request has at least one question.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string_view>
#include <variant>

#include "kev/text/request_decoder.h"

namespace {

void require(bool ok) {
  if (!ok) std::abort();
}

template <class T>
void check(const kev::Decoded<T>& d, std::string_view body) {
  const auto* r = std::get_if<kev::Refusal>(&d);
  if (!r) return;
  const bool json = nlohmann::json::accept(body.begin(), body.end());
  require(r->status == (json ? 422 : 400));
  require(!r->detail.empty());
  (void)kev::OrderedJson{{"detail", r->detail}}.dump();  // throws on invalid UTF-8
  // The 400 sentence never echoes the body: printable ASCII.
  if (!json)
    for (unsigned char c : r->detail) require(c >= 0x20 && c < 0x7f);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const uint8_t mode = data[0];
  const std::string_view body(reinterpret_cast<const char*>(data + 1), size - 1);
  kev::DecodeOptions options;
  options.date_facts = (mode & 1) != 0;
  if (mode & 2) options.json = {.max_object_keys = 8, .max_array_elements = 8, .max_depth = 8};
  if (mode & 4) {
    check(kev::decode_permute_request(body, options), body);
  } else {
    const auto decoded = kev::decode_request(body, options);
    check(decoded, body);
    if (const auto* request = std::get_if<kev::ApiRequest>(&decoded))
      require(!request->questions.empty());
  }
  return 0;
}
