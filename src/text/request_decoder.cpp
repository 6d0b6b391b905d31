// The request decoder (kev/text/request_decoder.h).
#include "kev/text/request_decoder.h"

#include <fmt/format.h>

#include "kev/core/error.h"
#include "kev/core/json_strict.h"
#include "kev/text/date_facts.h"

namespace kev {
namespace {

// Upstream's KEV_DATE_FACTS: the request's state with its date facts (a body that is no object
// or has no state is left for the mapping to refuse).
void add_date_facts(OrderedJson& request) {
  if (!request.is_object()) return;
  if (auto st = request.find("state"); st != request.end()) *st = with_date_facts(*st);
}

// Steps 1 and 2 of the header, then `map` (steps 3 and 4) on the parsed body.
template <class Request, class Map>
Decoded<Request> decode(std::string_view body, const DecodeOptions& options, Map map) {
  // Syntax first (linear, builds nothing), so that every later refusal is a 422.
  if (!nlohmann::json::accept(body.begin(), body.end()))
    return Refusal{400, json_syntax_error(body), ErrorKind::kBadInput};
  try {
    OrderedJson json = parse_json_strict(body, "the request body", options.json);
    return map(json);
  } catch (const Error& e) {
    return Refusal{http_status(e.kind()), e.what(), e.kind()};
  }
}

}  // namespace

Decoded<ApiRequest> decode_request(std::string_view body, const DecodeOptions& options) {
  return decode<ApiRequest>(body, options, [&](OrderedJson& json) {
    if (options.date_facts) add_date_facts(json);
    return request_from_json(json);
  });
}

Decoded<PermuteRequest> decode_permute_request(std::string_view body,
                                               const DecodeOptions& options) {
  return decode<PermuteRequest>(body, options, [&](OrderedJson& json) {
    if (options.date_facts && json.is_object())
      if (auto r = json.find("request"); r != json.end()) add_date_facts(*r);
    return permute_request_from_json(json);
  });
}

// Why a body that nlohmann::json::accept refused is not JSON, for its 400: where and what ("not
// valid JSON" alone is false for 1e400, which is valid JSON whose value no double holds). Only
// called on the refusal path; the library's message is cut to its reason and kept to printable
// ASCII, since its "last read" part echoes client bytes.
std::string json_syntax_error(std::string_view body) {
  struct Handler : nlohmann::json_sax<nlohmann::json> {
    std::size_t at = 0;
    std::string reason;
    bool null() override { return true; }
    bool boolean(bool) override { return true; }
    bool number_integer(number_integer_t) override { return true; }
    bool number_unsigned(number_unsigned_t) override { return true; }
    bool number_float(number_float_t, const string_t&) override { return true; }
    bool string(string_t&) override { return true; }
    bool binary(binary_t&) override { return true; }
    bool start_object(std::size_t) override { return true; }
    bool key(string_t&) override { return true; }
    bool end_object() override { return true; }
    bool start_array(std::size_t) override { return true; }
    bool end_array() override { return true; }
    bool parse_error(std::size_t position, const std::string&,
                     const nlohmann::detail::exception& e) override {
      at = position;
      reason = json_error_reason(e.what());
      return false;
    }
  } handler;
  nlohmann::json::sax_parse(body.begin(), body.end(), &handler);
  if (handler.reason.empty()) return "the request body is not valid JSON";
  return fmt::format("the request body is not valid JSON (byte {}: {})", handler.at,
                     handler.reason);
}

}  // namespace kev
