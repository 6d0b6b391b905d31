#include "kev/serve/http_server.h"

#include <httplib.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <mutex>
#include <new>
#include <optional>

#include "kev/core/error.h"
#include "kev/core/file.h"

namespace kev {
namespace {

constexpr const char* kAlias = "kev-latest";
constexpr const char* kJson = "application/json";

// At most max_inflight holders at once, at most max_queue waiting for a slot; enter() refuses
// at once when both are full, so overload is answered instead of piling up.
class Admission {
 public:
  Admission(size_t max_inflight, size_t max_queue)
      : max_inflight_(max_inflight), max_queue_(max_queue) {}

  bool enter() {
    std::unique_lock lock(mutex_);
    if (inflight_ < max_inflight_) {
      ++inflight_;
      return true;
    }
    if (queued_ >= max_queue_) return false;
    ++queued_;
    cv_.wait(lock, [&] { return inflight_ < max_inflight_; });
    --queued_;
    ++inflight_;
    return true;
  }
  void leave() {
    {
      std::lock_guard lock(mutex_);
      --inflight_;
    }
    cv_.notify_one();
  }
  std::pair<size_t, size_t> counts() const {
    std::lock_guard lock(mutex_);
    return {inflight_, queued_};
  }

 private:
  size_t max_inflight_, max_queue_;
  size_t inflight_ = 0, queued_ = 0;
  mutable std::mutex mutex_;
  std::condition_variable cv_;
};

void send_json(httplib::Response& res, int status, const OrderedJson& body) {
  res.status = status;
  res.set_content(body.dump(), kJson);
}

void send_detail(httplib::Response& res, int status, const std::string& detail) {
  send_json(res, status, OrderedJson{{"detail", detail}});
}

// When the current request's headers were read (set by the pre-routing handler, read by the
// logger on the same connection thread).
thread_local std::optional<std::chrono::steady_clock::time_point> t_request_start;

}  // namespace

struct HttpServer::Impl {
  std::atomic<const Scorer*> scorer{nullptr};  // null while the bundle loads
  std::atomic<bool> draining{false};
  std::string model;
  ServeOptions options;
  Admission admission;
  httplib::Server server;

  Impl(const Scorer* s, std::string m, ServeOptions o)
      : scorer(s),
        model(std::move(m)),
        options(std::move(o)),
        admission(options.max_inflight, options.max_queue) {}

  bool known_model(const std::string& name) const { return name == model || name == kAlias; }

  std::string served_models() const {
    return model == kAlias ? fmt::format("\"{}\"", kAlias)
                           : fmt::format("\"{}\" (alias \"{}\")", model, kAlias);
  }

  bool ready() const { return scorer.load() != nullptr && !draining.load(); }

  // The /v1 answer while the bundle loads: 503 + Retry-After (a balancer retries elsewhere).
  bool refuse_while_loading(httplib::Response& res) const {
    if (scorer.load() != nullptr) return false;
    res.set_header("Retry-After", "1");
    send_detail(res, 503, "the model is still loading; retry later");
    return true;
  }

  void score(const httplib::Request& req, httplib::Response& res) {
    if (refuse_while_loading(res)) return;
    const Scorer& scorer = *this->scorer.load();
    // httplib already refuses a declared Content-Length over the limit; this also covers
    // chunked bodies.
    if (req.body.size() > options.max_body)
      return send_detail(res, 413,
                         fmt::format("the request body is larger than {} bytes", options.max_body));
    if (!nlohmann::json::accept(req.body))
      return send_detail(res, 400, "the request body is not valid JSON");
    try {
      ApiRequest request = parse_request(req.body);
      if (!known_model(request.model))
        return send_detail(res, 422,
                           fmt::format("model: \"{}\" is not served here; this server serves {}",
                                       request.model, served_models()));
      if (!admission.enter()) {
        auto [inflight, queued] = admission.counts();
        res.set_header("Retry-After", "1");
        return send_detail(res, 503,
                           fmt::format("the server is busy ({} scoring, {} queued); retry later",
                                       inflight, queued));
      }
      ScoreResult result;
      try {
        result = scorer.score(request);
      } catch (...) {
        admission.leave();
        throw;
      }
      admission.leave();
      send_json(res, 200, result.response);
    } catch (const Error& e) {
      send_detail(res, http_status(e.kind()), e.what());
    } catch (const std::bad_alloc&) {
      send_detail(res, 503, "out of memory while scoring this request; retry later");
    } catch (const std::exception& e) {
      send_detail(res, 500, fmt::format("internal error: {}", e.what()));
    }
  }

  OrderedJson health() const {
    auto [inflight, queued] = admission.counts();
    OrderedJson cache_json = {{"entries", 0}, {"tokens", 0}, {"hits", 0}, {"misses", 0}};
    if (const Scorer* s = scorer.load()) {
      const auto& cache = s->cache();
      cache_json = {{"entries", cache.entries()},
                    {"tokens", cache.tokens()},
                    {"hits", cache.hits()},
                    {"misses", cache.misses()}};
    }
    return {{"status", "ok"},   {"model", model},      {"inflight", inflight},
            {"queued", queued}, {"cache", cache_json}, {"ready", ready()}};
  }

  // Readiness for a balancer: 200 only when loaded and not draining; else 503 + Retry-After.
  void health_ready(httplib::Response& res) const {
    if (ready()) return send_json(res, 200, OrderedJson{{"status", "ready"}, {"model", model}});
    res.set_header("Retry-After", "1");
    send_json(res, 503, OrderedJson{{"status", scorer.load() ? "draining" : "loading"}});
  }

  OrderedJson models() const {
    OrderedJson data = OrderedJson::array();
    data.push_back({{"id", model}, {"object", "model"}});
    if (model != kAlias) data.push_back({{"id", kAlias}, {"object", "model"}});
    return {{"object", "list"}, {"data", data}};
  }

  void route() {
    server.Post("/v1/systemone",
                [this](const httplib::Request& req, httplib::Response& res) { score(req, res); });
    server.Get("/health", [this](const httplib::Request&, httplib::Response& res) {
      send_json(res, 200, health());
    });
    server.Get("/health/live", [](const httplib::Request&, httplib::Response& res) {
      send_json(res, 200, OrderedJson{{"status", "live"}});
    });
    server.Get("/health/ready",
               [this](const httplib::Request&, httplib::Response& res) { health_ready(res); });
    server.Get("/v1/models", [this](const httplib::Request&, httplib::Response& res) {
      if (!refuse_while_loading(res)) send_json(res, 200, models());
    });
    not_allowed("/v1/systemone", "POST");
    not_allowed("/health", "GET");
    not_allowed("/health/live", "GET");
    not_allowed("/health/ready", "GET");
    not_allowed("/v1/models", "GET");
  }

  // 405 for every method on `path` other than `allowed`.
  void not_allowed(const std::string& path, const std::string& allowed) {
    auto handler = [path, allowed](const httplib::Request& req, httplib::Response& res) {
      res.set_header("Allow", allowed);
      send_detail(res, 405,
                  fmt::format("{} does not accept {}; use {}", path, req.method, allowed));
    };
    if (allowed != "GET") server.Get(path, handler);
    if (allowed != "POST") server.Post(path, handler);
    server.Put(path, handler);
    server.Patch(path, handler);
    server.Delete(path, handler);
    server.Options(path, handler);
  }

  void configure() {
    server.set_payload_max_length(options.max_body);
    // The library's default also sets SO_REUSEPORT, which would let a second server bind the
    // same port silently and split the traffic; keep only SO_REUSEADDR (quick restarts).
    server.set_socket_options([](socket_t sock) {
      int yes = 1;
      setsockopt(sock, SOL_SOCKET, SO_REUSEADDR, &yes, sizeof(yes));
    });
    // Headers and body go out as separate writes; with Nagle on, the body waits for the
    // client's delayed ACK (~40 ms a response on Linux loopback).
    server.set_tcp_nodelay(true);
    server.set_keep_alive_timeout(2);  // an idle keep-alive connection holds a pool thread
    // Every admitted or queued request holds a connection thread, and a refusal needs a free
    // one to be answered at once; the spare threads serve /health and refusals.
    const size_t threads = options.max_inflight + options.max_queue + 8;
    server.new_task_queue = [threads] { return new httplib::ThreadPool(threads); };
    using Handled = httplib::Server::HandlerWithResponse;  // (the overloads are ambiguous)
    server.set_error_handler(Handled([this](const httplib::Request& req, httplib::Response& res) {
      if (!res.body.empty()) return httplib::Server::HandlerResponse::Unhandled;
      if (res.status == 404) {
        send_detail(res, 404, fmt::format("no such path: {}", req.path));
      } else if (res.status == 413) {
        send_detail(res, 413,
                    fmt::format("the request body is larger than {} bytes", options.max_body));
      } else if (res.status == 400) {
        send_detail(res, 400, "malformed HTTP request");
      } else {
        send_detail(res, res.status, fmt::format("HTTP status {}", res.status));
      }
      return httplib::Server::HandlerResponse::Handled;
    }));
    server.set_exception_handler(
        [](const httplib::Request&, httplib::Response& res, std::exception_ptr) {
          send_detail(res, 500, "internal error while handling the request");
        });
    server.set_pre_routing_handler([](const httplib::Request&, httplib::Response&) {
      t_request_start = std::chrono::steady_clock::now();
      return httplib::Server::HandlerResponse::Unhandled;
    });
    if (options.log_requests) {
      server.set_logger([](const httplib::Request& req, const httplib::Response& res) {
        double ms = 0;
        if (t_request_start)
          ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() -
                                                         *t_request_start)
                   .count();
        t_request_start.reset();
        std::fprintf(stderr, "kev serve: %s %s %d %.1f ms\n", req.method.c_str(), req.path.c_str(),
                     res.status, ms);
      });
    }
  }
};

HttpServer::HttpServer(const Scorer& scorer, std::string model_name, ServeOptions options)
    : HttpServer(std::move(model_name), std::move(options)) {
  set_scorer(scorer);
}

HttpServer::HttpServer(std::string model_name, ServeOptions options)
    : impl_(std::make_unique<Impl>(nullptr, std::move(model_name), std::move(options))) {
  if (impl_->options.max_inflight == 0)
    fail(ErrorKind::kBadInput, "--max-inflight must be at least 1");
  impl_->configure();
  impl_->route();
}

HttpServer::~HttpServer() = default;

int HttpServer::bind() {
  const ServeOptions& o = impl_->options;
  int port = o.port;
  if (port == 0) {
    port = impl_->server.bind_to_any_port(o.host);
    if (port < 0) port = 0;
  } else if (port < 0 || port > 65535) {
    fail(ErrorKind::kBadInput, "--port {} is not a TCP port (0..65535)", port);
  } else if (!impl_->server.bind_to_port(o.host, port)) {
    port = 0;
  }
  if (port == 0)
    fail(ErrorKind::kIo, "cannot listen on {}:{} (address in use, or not an address of this host)",
         o.host, o.port);
  return port;
}

void HttpServer::run() {
  impl_->server.listen_after_bind();
}

void HttpServer::stop() {
  impl_->server.stop();
}

void HttpServer::set_scorer(const Scorer& scorer) {
  impl_->scorer = &scorer;
}

void HttpServer::drain() {
  impl_->draining = true;
}

std::string bundle_model_name(const std::string& bundle_dir) {
  const std::string path = bundle_dir + "/" + "kev_export.json";
  OrderedJson manifest = parse_json_strict(read_file(path), path);
  auto it = manifest.find("model");
  if (!manifest.is_object() || it == manifest.end() || !it->is_string() ||
      it->get<std::string>().empty())
    fail(ErrorKind::kBadInput, "{}: \"model\" is missing or not a non-empty string", path);
  return it->get<std::string>();
}

}  // namespace kev
