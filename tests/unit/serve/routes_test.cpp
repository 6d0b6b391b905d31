// route_request (src/serve/routes.h): the server's whole decision for one request, tested without
// a socket: CORS preflight, the API key on /v1 paths, unknown paths, methods (HEAD as GET), the
// model still loading, answered routes and scored ones. Statuses and fields as docs/api.md
// states them (Starlette's CORS preflight, the Bearer key on every /v1 path, Allow on a 405).
#include <gtest/gtest.h>

#include <boost/asio/post.hpp>
#include <memory>
#include <stdexcept>
#include <string>
#include <variant>

#include "kev/serve/metrics.h"
#include "serve/routes.h"
#include "serve/server_state.h"

namespace kev {
namespace {

namespace http = boost::beast::http;

Request request(http::verb method, const std::string& target) {
  Request r{method, target, 11};
  r.set(http::field::host, "localhost");
  return r;
}

std::shared_ptr<HttpServer::Impl> server(const std::string& api_key = "") {
  ServeOptions o;
  o.api_key = api_key;
  return std::make_shared<HttpServer::Impl>(o);
}

// A scorer counts as published once the pointer is set; route_request only checks it (scored
// routes are handed on, never scored here), so a stand-in address that is never read will do.
void publish_stand_in(HttpServer::Impl& s) {
  static const int stand_in = 0;
  s.scoring.scorer.store(reinterpret_cast<const Scorer*>(&stand_in));
}

Reply reply_of(std::variant<Reply, Endpoint> routed) {
  EXPECT_TRUE(std::holds_alternative<Reply>(routed));
  return std::holds_alternative<Reply>(routed) ? std::get<Reply>(std::move(routed)) : Reply{};
}

std::string header(const Reply& r, const std::string& name) {
  for (const auto& [k, v] : r.headers)
    if (k == name) return v;
  return "<absent>";
}

TEST(RouteRequest, AnUnknownPathIs404NamingIt) {
  auto s = server();
  const Reply r = reply_of(route_request(*s, request(http::verb::get, "/nope?x=1")));
  EXPECT_EQ(r.status, 404);
  EXPECT_EQ(r.body, R"({"detail":"no such path: /nope"})");
}

TEST(RouteRequest, AWrongMethodIs405WithAllow) {
  auto s = server();
  Reply r = reply_of(route_request(*s, request(http::verb::post, "/health")));
  EXPECT_EQ(r.status, 405);
  EXPECT_EQ(r.allow, "GET, HEAD");
  EXPECT_EQ(r.body, R"({"detail":"/health does not accept POST; use GET"})");
  r = reply_of(route_request(*s, request(http::verb::get, "/v1/systemone")));
  EXPECT_EQ(r.status, 405);
  EXPECT_EQ(r.allow, "POST");
  EXPECT_EQ(r.body, R"({"detail":"/v1/systemone does not accept GET; use POST"})");
}

TEST(RouteRequest, HeadAnswersAsGet) {
  auto s = server();
  const Reply r = reply_of(route_request(*s, request(http::verb::head, "/health/live")));
  EXPECT_EQ(r.status, 200);
  EXPECT_EQ(r.body, R"({"status":"live"})");  // the connection drops a HEAD's body when writing
}

TEST(RouteRequest, APreflightNeedsOriginAndRequestMethodOnAnyPath) {
  auto s = server("secret");
  Request req = request(http::verb::options, "/anywhere");
  req.set(http::field::origin, "https://example.com");
  req.set(http::field::access_control_request_method, "POST");
  Reply r = reply_of(route_request(*s, req));
  EXPECT_TRUE(r.preflight);
  EXPECT_EQ(r.status, 200);
  EXPECT_EQ(header(r, "access-control-allow-origin"), "*");
  req.set(http::field::access_control_request_method, "BREW");
  r = reply_of(route_request(*s, req));
  EXPECT_EQ(r.status, 400);
  EXPECT_EQ(r.body, "Disallowed CORS method");
  // Without Origin an OPTIONS is an ordinary request: 404 here, 405 on a route.
  r = reply_of(route_request(*s, request(http::verb::options, "/health")));
  EXPECT_FALSE(r.preflight);
  EXPECT_EQ(r.status, 405);
}

TEST(RouteRequest, TheKeyGuardsEveryV1PathKnownOrNot) {
  auto s = server("secret");
  for (const char* target : {"/v1/models", "/v1/systemone", "/v1/unknown"}) {
    const Reply r = reply_of(route_request(*s, request(http::verb::get, target)));
    EXPECT_EQ(r.status, 401) << target;
    EXPECT_EQ(header(r, "www-authenticate"), "Bearer") << target;
  }
  Request wrong = request(http::verb::get, "/v1/models");
  wrong.set(http::field::authorization, "Bearer secreT");
  EXPECT_EQ(reply_of(route_request(*s, wrong)).status, 401);
  // Outside /v1 no key is asked for.
  EXPECT_EQ(reply_of(route_request(*s, request(http::verb::get, "/health/live"))).status, 200);
  // With the key, /v1/models is routed: 503 while the model loads.
  Request right = request(http::verb::get, "/v1/models");
  right.set(http::field::authorization, "Bearer secret");
  const Reply r = reply_of(route_request(*s, right));
  EXPECT_EQ(r.status, 503);
  EXPECT_TRUE(r.retry_after);
}

TEST(RouteRequest, ScoredRoutesWaitForTheModelThenGoToAdmission) {
  auto s = server();
  Reply r = reply_of(route_request(*s, request(http::verb::post, "/v1/systemone")));
  EXPECT_EQ(r.status, 503);
  EXPECT_EQ(r.body, R"({"detail":"the model is still loading; retry later"})");
  publish_stand_in(*s);
  const struct {
    const char* path;
    Endpoint endpoint;
  } scored[] = {{"/v1/systemone", Endpoint::kSystemOne},
                {"/v1/systemone/permute", Endpoint::kPermute},
                {"/v1/systemone/separate", Endpoint::kSeparate}};
  for (const auto& [path, endpoint] : scored) {
    const auto routed = route_request(*s, request(http::verb::post, path));
    ASSERT_TRUE(std::holds_alternative<Endpoint>(routed)) << path;
    EXPECT_EQ(std::get<Endpoint>(routed), endpoint) << path;
  }
  s->scoring.scorer.store(nullptr);
}

// The connection set belongs to the I/O thread: /metrics reads it there and is refused elsewhere.
TEST(RouteRequest, MetricsRunOnlyOnTheIoThread) {
  auto s = server();
  EXPECT_THROW(route_request(*s, request(http::verb::get, "/metrics")), std::logic_error);
  Reply r;
  boost::asio::post(s->io,
                    [&] { r = reply_of(route_request(*s, request(http::verb::get, "/metrics"))); });
  s->io.run();
  EXPECT_EQ(r.status, 200);
  EXPECT_EQ(r.content_type, kMetricsContentType);
  EXPECT_NE(r.body.find("kev_open_connections 0\n"), std::string::npos) << r.body;
}

}  // namespace
}  // namespace kev
