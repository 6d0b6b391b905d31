// The route table and its handlers (routes.h).
#include "serve/routes.h"

#include <fmt/format.h>

#include "kev/core/sha256.h"
#include "kev/serve/http_framing.h"
#include "serve/server_state.h"

namespace kev {
namespace {

namespace http = boost::beast::http;
using Impl = HttpServer::Impl;

// Upstream's MODEL_NAMES: both serve this bundle; jev-latest is the TypeSafe SDK's default.
constexpr const char* kModelNames[] = {"kev-latest", "jev-latest"};
// Starlette's CORSMiddleware with allow_methods=["*"] (upstream kev/serve.py).
constexpr const char* kCorsMethods[] = {"DELETE", "GET", "HEAD", "OPTIONS", "PATCH", "POST", "PUT"};

const char* lifecycle_name(Lifecycle l) {
  return l == Lifecycle::kReady ? "ready" : l == Lifecycle::kLoading ? "loading" : "draining";
}

Reply health_reply(const Impl& srv) {
  auto [inflight, queued] = srv.admission.counts();
  const Lifecycle l = srv.lifecycle.load();
  const Scorer* s = srv.scoring.scorer.load();
  OrderedJson out = {{"status", l == Lifecycle::kReady     ? "ok"
                                : l == Lifecycle::kLoading ? "loading"
                                                           : "draining"},
                     {"ready", l == Lifecycle::kReady},
                     {"model", s ? OrderedJson(srv.model) : OrderedJson()},
                     {"inflight", inflight},
                     {"queued", queued}};
  out["temperature"] = s ? OrderedJson(s->head().temperature()) : OrderedJson();
  if (s) {
    const auto& cache = s->cache();
    out["cache"] = {{"entries", cache.entries()},
                    {"tokens", cache.tokens()},
                    {"hits", cache.hits()},
                    {"misses", cache.misses()},
                    {"bytes", cache.bytes()},
                    {"max_bytes", cache.limits().max_bytes},
                    {"reused_tokens", s->reused_tokens()},
                    {"computed_tokens", s->computed_tokens()}};
    if (const StateStore* store = s->state_store()) {
      const StateStoreCounts c = store->counts();
      out["state_dir"] = {{"hits", c.hits},
                          {"misses", c.misses},
                          {"rejected", c.rejected},
                          {"writes", c.writes},
                          {"write_errors", c.write_errors},
                          {"dropped", c.dropped},
                          {"pending", c.pending},
                          {"disk_bytes", c.disk_bytes}};
    } else {
      out["state_dir"] = nullptr;
    }
  } else {
    out["cache"] = nullptr;
  }
  out["batches"] = {{"max_batch", srv.options.max_batch},
                    {"passes", srv.scoring.passes.load()},
                    {"requests", srv.scoring.batched.load()},
                    {"largest", srv.scoring.largest_batch.load()}};
  if (const MemoryBudget* m = srv.scoring.memory()) {
    const MemoryBudget::Now now = m->now();
    out["memory"] = {{"budget", now.budget}, {"reserved", now.reserved}, {"waiting", now.waiting}};
  } else {
    out["memory"] = nullptr;
  }
  return json_reply(200, out);
}

Reply ready_reply(const Impl& srv) {
  const Lifecycle l = srv.lifecycle.load();
  if (l == Lifecycle::kReady) return json_reply(200, {{"status", "ready"}, {"model", srv.model}});
  Reply r = json_reply(503, {{"status", l == Lifecycle::kLoading ? "loading" : "draining"}});
  r.retry_after = true;
  return r;
}

// GET /metrics. On the I/O thread (connections is read here).
Reply metrics_reply(const Impl& srv) {
  MetricsSnapshot now;
  std::tie(now.inflight, now.queued) = srv.admission.counts();
  now.connections = srv.io_state->connections.size();
  now.lifecycle = lifecycle_name(srv.lifecycle.load());
  if (const Scorer* s = srv.scoring.scorer.load()) {
    const auto& c = s->cache();
    now.cache = MetricsSnapshot::Cache{.entries = c.entries(),
                                       .tokens = c.tokens(),
                                       .bytes = c.bytes(),
                                       .max_bytes = c.limits().max_bytes,
                                       .hits = c.hits(),
                                       .misses = c.misses(),
                                       .evictions = c.evictions(),
                                       .reused_tokens = s->reused_tokens(),
                                       .computed_tokens = s->computed_tokens()};
    if (const StateStore* store = s->state_store()) now.state_dir = store->counts();
  }
  Reply r;
  r.body = srv.metrics.render(now);
  r.content_type = kMetricsContentType;
  return r;
}

// Upstream's GET /v1/models: one TypeSafe card (name, description, release_date) per
// accepted name, plus serving details a client may ignore.
Reply models_reply(const Impl& srv) {
  const Scorer& s = *srv.scoring.scorer.load();
  const ScorerOptions& o = s.options();
  const auto& cache = s.cache();
  auto [inflight, queued] = srv.admission.counts();
  (void)inflight;
  OrderedJson card = {
      {"description", fmt::format("Kev pointer head on {}, serving {} at temperature {:.2f}",
                                  srv.bundle.base, srv.bundle.run, s.head().temperature())},
      {"release_date", srv.bundle.release_date},
      {"run", srv.bundle.run},
      {"base", srv.bundle.base},
      {"lora", srv.bundle.lora_rank},
      {"device", "cpu"},
      {"backend", "kev-native"},
      // the arithmetic that runs (--precision / KEV_DTYPE)
      {"dtype", torch_dtype_name(o.forward.precision)},
      // how the bundle stores its projections: "bf16", or a kev quantize bundle's kinds
      {"weights", s.model().weights().quantized() ? s.model().weights().stored_kinds() : "bf16"},
      {"temperature", s.head().temperature()},
      {"bundle_temperature", srv.bundle.temperature},
      {"max_state_tokens", o.limits.max_state},
      {"truncate_states", o.limits.truncate},
      {"cuda_graphs", nullptr},
      {"prefix_cache",
       {{"size", o.cache_entries},
        {"min_state_tokens", o.cache_min_tokens},
        {"max_tokens", o.cache_tokens},
        {"hits", cache.hits()},
        {"misses", cache.misses()},
        {"cached_states", cache.entries()},
        {"oom_retries", 0}}},
      {"batches",
       {{"count", srv.scoring.passes.load()},
        {"requests", srv.scoring.batched.load()},
        {"queued", queued}}},
      {"bundle_model", srv.bundle.model}};
  OrderedJson list = OrderedJson::array();
  for (const char* name : kModelNames) {
    OrderedJson one = {{"name", name}};
    one.update(card);
    list.push_back(std::move(one));
  }
  return json_reply(200, {{"models", std::move(list)}});
}

Reply live(const Impl&) {
  return json_reply(200, {{"status", "live"}});
}

Reply openapi(const Impl& s) {
  Reply r;
  r.body = s.openapi;
  return r;
}

// One route a line (clang-format would fill columns).
// clang-format off
constexpr Route kRoutes[] = {
    {"/v1/systemone",          http::verb::post, true,  nullptr,       Endpoint::kSystemOne},
    {"/v1/systemone/permute",  http::verb::post, true,  nullptr,       Endpoint::kPermute},
    {"/v1/systemone/separate", http::verb::post, true,  nullptr,       Endpoint::kSeparate},
    {"/health",                http::verb::get,  false, health_reply,  {}},
    {"/health/live",           http::verb::get,  false, live,          {}},
    {"/health/ready",          http::verb::get,  false, ready_reply,   {}},
    {"/v1/models",             http::verb::get,  true,  models_reply,  {}},
    {"/metrics",               http::verb::get,  false, metrics_reply, {}},
    {"/openapi.json",          http::verb::get,  false, openapi,       {}}};
// clang-format on

}  // namespace

std::variant<Reply, Endpoint> route_request(const Impl& srv, const Request& req) {
  // The connection's checks (http_framing.h) refused every target without a path.
  const auto target = target_path(std::string_view(req.target().data(), req.target().size()));
  if (!target) return detail(400, "the request target has no path", true);
  const std::string_view path = *target;
  if (req.method() == http::verb::options && req.find(http::field::origin) != req.end() &&
      req.find(http::field::access_control_request_method) != req.end())
    return preflight(req);
  // Upstream: every path under /v1 (known or not) needs the key when one is set.
  if (!srv.options.api_key.empty() && path.substr(0, 3) == "/v1" && !authorized(srv, req)) {
    Reply r = detail(401, "missing or invalid API key; send Authorization: Bearer <KEV_API_KEY>");
    r.headers.emplace_back("www-authenticate", "Bearer");
    return r;
  }
  const Route* route = find_route(path);
  if (!route) return detail(404, fmt::format("no such path: {}", printable(path)));
  // HEAD is GET without the body (RFC 9110 9.3.2; Starlette adds it to every GET route).
  const bool get = route->method == http::verb::get;
  if (req.method() != route->method && !(get && req.method() == http::verb::head)) {
    const auto m = req.method_string();
    Reply r = detail(405, fmt::format("{} does not accept {}; use {}", route->path,
                                      printable(std::string_view(m.data(), m.size()), 32),
                                      get ? "GET" : "POST"));
    r.allow = get ? "GET, HEAD" : "POST";
    return r;
  }
  if (route->needs_model && !srv.scoring.scorer.load())
    return detail(503, "the model is still loading; retry later");
  if (route->answer) return route->answer(srv);
  return route->endpoint;
}

const Route* find_route(std::string_view path) {
  for (const Route& r : kRoutes)
    if (path == r.path) return &r;
  return nullptr;
}

std::vector<std::string> route_names() {
  std::vector<std::string> out;
  for (const Route& r : kRoutes) out.emplace_back(r.path);
  return out;
}

Reply preflight(const Request& req) {
  const auto m = req[http::field::access_control_request_method];
  const std::string_view method(m.data(), m.size());
  bool allowed = false;
  for (const char* x : kCorsMethods) allowed = allowed || method == x;
  Reply r;
  r.preflight = true;
  r.status = allowed ? 200 : 400;
  r.body = allowed ? "OK" : "Disallowed CORS method";
  r.content_type = "text/plain; charset=utf-8";
  r.headers = {{"access-control-allow-origin", "*"},
               {"access-control-allow-methods", "DELETE, GET, HEAD, OPTIONS, PATCH, POST, PUT"},
               {"access-control-max-age", "600"}};
  if (auto h = req.find(http::field::access_control_request_headers); h != req.end()) {
    const std::string_view v(h->value().data(), h->value().size());
    if (printable_ascii(v)) r.headers.emplace_back("access-control-allow-headers", v);
  }
  return r;
}

bool authorized(const Impl& srv, const Request& req) {
  auto it = req.find(http::field::authorization);
  const std::string_view got = it == req.end()
                                   ? std::string_view()
                                   : std::string_view(it->value().data(), it->value().size());
  Sha256 h;
  h.update(got.data(), got.size());
  const std::array<uint8_t, 32> a = h.digest();
  uint8_t diff = 0;
  for (size_t i = 0; i < a.size(); ++i) diff |= static_cast<uint8_t>(a[i] ^ srv.auth_digest[i]);
  return diff == 0;
}

}  // namespace kev
