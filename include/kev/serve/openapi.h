// The OpenAPI 3.1 document of `kev serve` (served at GET /openapi.json). Its one source is
// src/serve/openapi.json, embedded at build time; tests/integration/test_openapi.py validates it
// with an OpenAPI validator and checks real responses of every endpoint and status against it.
#pragma once
#include <string>

namespace kev {

// The document, compact, with info.version set to this build's version.
std::string openapi_document();

}  // namespace kev
