#include "kev/serve/openapi.h"

#include "kev/core/error.h"
#include "kev/text/api.h"

namespace kev {

extern const char* const kOpenApiJson;  // src/serve/openapi.json, embedded by CMake

std::string openapi_document() {
  OrderedJson doc = parse_json_strict(kOpenApiJson, "the embedded openapi.json");
  doc["info"]["version"] = KEV_VERSION;
  return doc.dump();
}

}  // namespace kev
