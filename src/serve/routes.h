// Routes: the one table of what the server answers, one handler per route, and the checks made
// before routing (Starlette's CORS preflight, bearer auth). Endpoints and statuses are
// documented in src/serve/openapi.json and docs/api.md; a new endpoint is one line here.
//
// A route either answers on the I/O thread (`answer`: health, metrics, models, the OpenAPI
// document; cheap, never blocking) or is scored (`answer` null: its body goes through
// Admission to the ScoringService as `endpoint`). Handlers read the server's state
// (server_state.h) and must run on the I/O thread (/metrics reads the connection count).
// route_request() is the whole decision; the connection only reads, queues and writes.
#pragma once
#include <boost/beast/http.hpp>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "serve/reply.h"
#include "serve/scoring_service.h"

namespace kev {

using Request = boost::beast::http::request<boost::beast::http::string_body>;

struct Route {
  const char* path;
  boost::beast::http::verb method;  // GET routes also answer HEAD (without the body)
  bool needs_model;                 // 503 "still loading" until the scorer is ready
  Reply (*answer)(const HttpServer::Impl& server);  // null: scored through admission
  Endpoint endpoint;                                // what a scored route asks for
};

// What the server does with one request whose header and body are read and checked
// (http_framing.h): the reply to send now, or the endpoint to score through admission. The
// checks before routing, in order: CORS preflight, the API key (every path under /v1), the
// path, the method (HEAD as GET), the model loaded. A function of the request and the server's
// state that touches no connection; on the I/O thread (GET /metrics reads the connection set).
std::variant<Reply, Endpoint> route_request(const HttpServer::Impl& server, const Request& req);

// The route whose path is exactly `path`, else null.
const Route* find_route(std::string_view path);
// The path of every route, in the order of their metric labels.
std::vector<std::string> route_names();

// Starlette's CORS preflight (allow_origins/methods/headers "*"): the answer to an OPTIONS with
// Origin and Access-Control-Request-Method, on any path, before routing.
Reply preflight(const Request& req);
// "Authorization: Bearer <key>" exactly, as upstream's hmac.compare_digest: both sides hashed
// to fixed-size digests, compared with no branch on their bytes.
bool authorized(const HttpServer::Impl& server, const Request& req);

}  // namespace kev
