// kev bench's client side (kev/acceptance/bench_client.h).
#include "kev/acceptance/bench_client.h"

#include <sys/utsname.h>
#include <unistd.h>

#include <atomic>
#include <utility>  // before Asio: its awaitable.hpp uses std::exchange
//
#include <boost/asio.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <chrono>
#include <cstdio>
#include <exception>
#include <mutex>
#include <thread>

#include "kev/core/error.h"
#include "kev/core/file.h"
#include "kev/text/json_lines.h"

namespace kev {
namespace {

namespace beast = boost::beast;
namespace http = beast::http;
namespace asio = boost::asio;

}  // namespace

std::vector<BenchRequest> read_bench_requests(const std::string& path) {
  std::vector<BenchRequest> out;
  for_each_json_line(path, JsonLimits{}, [&](OrderedJson& o, size_t line) {
    if (!o.is_object()) fail(ErrorKind::kBadInput, "a request is a JSON object");
    BenchRequest r;
    r.id = std::to_string(line);
    if (auto it = o.find("id"); it != o.end()) {
      r.id = it->is_string() ? it->get<std::string>() : it->dump();
      o.erase("id");
    }
    o.erase("labels");
    r.body = o.dump();
    out.push_back(std::move(r));
  });
  if (out.empty()) fail(ErrorKind::kBadInput, "{}: no request", path);
  return out;
}

size_t answer_input_tokens(const std::string& body) {
  const auto j = nlohmann::json::parse(body, nullptr, false);
  if (!j.is_object()) return 0;
  auto u = j.find("usage");
  if (u == j.end() || !u->is_object()) return 0;
  auto t = u->find("input_tokens");
  return t != u->end() && t->is_number_unsigned() ? t->get<size_t>() : 0;
}

BenchReply BundleTarget::send(size_t, const std::string& body) {
  BenchReply r;
  const auto start = std::chrono::steady_clock::now();
  try {
    ScoreResult s = scorer_.score(body);
    r.body = s.response.dump();
    r.outcome.status = 200;
    r.outcome.input_tokens = s.usage.input_tokens;
  } catch (const Error& e) {
    if (e.kind() == ErrorKind::kInterrupted) throw;
    r.outcome.status = http_status(e.kind());
    r.body = OrderedJson{{"detail", e.what()}}.dump();
  }
  r.outcome.latency_ms =
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
  return r;
}

BenchUrl parse_bench_url(const std::string& url) {
  const std::string scheme = "http://";
  if (url.rfind("https://", 0) == 0)
    fail(ErrorKind::kUnsupported,
         "--url {}: https is not supported; put a TLS proxy in front or "
         "bench the plain-HTTP address",
         url);
  if (url.rfind(scheme, 0) != 0)
    fail(ErrorKind::kBadInput, "--url {}: must look like http://HOST:PORT[/path], PORT 1..65535",
         url);
  std::string rest = url.substr(scheme.size());
  BenchUrl u;
  const size_t slash = rest.find('/');
  u.path = slash == std::string::npos ? "" : rest.substr(slash);
  rest = rest.substr(0, slash);
  const size_t colon = rest.rfind(':');
  u.host = colon == std::string::npos ? rest : rest.substr(0, colon);
  u.port = colon == std::string::npos ? "80" : rest.substr(colon + 1);
  const bool port_ok = !u.port.empty() && u.port.size() <= 5 &&
                       u.port.find_first_not_of("0123456789") == std::string::npos &&
                       std::stoi(u.port) >= 1 && std::stoi(u.port) <= 65535;
  if (u.host.empty() || !port_ok)
    fail(ErrorKind::kBadInput, "--url {}: must look like http://HOST:PORT[/path], PORT 1..65535",
         url);
  if (u.path.empty() || u.path == "/") u.path = "/v1/systemone";
  return u;
}

// Over HTTP/1.1 keep-alive: one connection per worker, reopened after a failure.
struct HttpTarget::Conn {
  asio::io_context io;
  std::unique_ptr<beast::tcp_stream> stream;
  beast::flat_buffer buffer;
};

HttpTarget::HttpTarget(BenchUrl url, std::string key, double timeout_s)
    : url_(std::move(url)), key_(std::move(key)), timeout_(timeout_s) {}
HttpTarget::~HttpTarget() = default;

void HttpTarget::prepare(size_t workers) {
  while (conns_.size() < workers) conns_.push_back(std::make_unique<Conn>());
}

BenchReply HttpTarget::send(size_t worker, const std::string& body) {
  return exchange(*conns_.at(worker), true, url_.path, body);
}

std::optional<nlohmann::json> HttpTarget::get_json(const std::string& path) {
  Conn c;
  BenchReply r = exchange(c, false, path, "");
  if (r.outcome.status != 200) return std::nullopt;
  auto j = nlohmann::json::parse(r.body, nullptr, false);
  if (j.is_discarded()) return std::nullopt;
  return j;
}

BenchReply HttpTarget::exchange(Conn& c, bool post, const std::string& path,
                                const std::string& body) {
  BenchReply r;
  const auto start = std::chrono::steady_clock::now();
  const auto timeout = std::chrono::duration_cast<std::chrono::steady_clock::duration>(
      std::chrono::duration<double>(timeout_));
  for (int attempt = 0; attempt < 2; ++attempt) {
    const bool fresh = !c.stream;
    try {
      if (fresh) {
        asio::ip::tcp::resolver resolver(c.io);
        c.stream = std::make_unique<beast::tcp_stream>(c.io);
        c.stream->expires_after(timeout);
        c.stream->connect(resolver.resolve(url_.host, url_.port));
        c.buffer.clear();
      }
      http::request<http::string_body> req{post ? http::verb::post : http::verb::get, path, 11};
      req.set(http::field::host, url_.host + ":" + url_.port);
      req.set(http::field::user_agent, std::string("kev-bench/") + KEV_VERSION);
      if (!key_.empty()) req.set(http::field::authorization, "Bearer " + key_);
      if (post) {
        req.set(http::field::content_type, "application/json");
        req.body() = body;
      }
      req.keep_alive(true);
      req.prepare_payload();
      c.stream->expires_after(timeout);
      http::write(*c.stream, req);
      http::response_parser<http::string_body> parser;
      parser.body_limit(
          kMaxBenchAnswerBytes);  // a server's answer cannot grow the client unbounded
      http::read(*c.stream, c.buffer, parser);
      auto res = parser.release();
      r.outcome.status = static_cast<int>(res.result_int());
      r.body = std::move(res.body());
      if (r.outcome.status == 200) r.outcome.input_tokens = answer_input_tokens(r.body);
      if (!res.keep_alive()) c.stream.reset();
      break;
    } catch (const std::exception& e) {
      c.stream.reset();
      // A kept-alive connection the server closed meanwhile: one retry on a fresh one.
      if (!fresh && attempt == 0) continue;
      r.outcome.status = 0;
      r.body = OrderedJson{{"detail", fmt::format("no HTTP answer: {}", e.what())}}.dump();
      break;
    }
  }
  r.outcome.latency_ms =
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
  return r;
}

std::vector<BenchReply> run_bench_pass(BenchTarget& target,
                                       const std::vector<BenchRequest>& requests,
                                       const std::vector<size_t>& order, size_t concurrency,
                                       const std::string& label, bool progress, double* wall_s) {
  target.prepare(concurrency);
  std::vector<BenchReply> replies(order.size());
  std::atomic<size_t> next{0}, done{0};
  std::atomic<bool> finished{false};
  std::exception_ptr failure;
  std::mutex failure_mutex;
  const auto start = std::chrono::steady_clock::now();
  std::vector<std::thread> workers;
  for (size_t w = 0; w < std::min(concurrency, order.size()); ++w)
    workers.emplace_back([&, w] {
      try {
        for (size_t i; (i = next.fetch_add(1)) < order.size();) {
          replies[i] = target.send(w, requests[order[i]].body);
          done.fetch_add(1);
        }
      } catch (...) {
        std::lock_guard<std::mutex> lock(failure_mutex);
        if (!failure) failure = std::current_exception();
        next.store(order.size());
      }
    });
  std::thread drawer;
  if (progress)
    drawer = std::thread([&] {
      while (!finished.load()) {
        std::fprintf(stderr, "\r%s: %zu/%zu requests", label.c_str(), done.load(), order.size());
        std::fflush(stderr);
        std::this_thread::sleep_for(std::chrono::milliseconds(200));
      }
      std::fprintf(stderr, "\r%s: %zu/%zu requests\n", label.c_str(), done.load(), order.size());
    });
  for (std::thread& t : workers) t.join();
  *wall_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  finished.store(true);
  if (drawer.joinable()) drawer.join();
  if (failure) std::rethrow_exception(failure);
  return replies;
}

nlohmann::json bench_machine() {
  utsname u{};
  uname(&u);
  char host[256] = {};
  gethostname(host, sizeof host - 1);
  const long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGESIZE);
  std::string model;
  try {
    const std::string cpuinfo = read_file("/proc/cpuinfo");
    const size_t at = cpuinfo.find("model name");
    if (at != std::string::npos) {
      const size_t colon = cpuinfo.find(':', at), end = cpuinfo.find('\n', at);
      if (colon != std::string::npos && colon < end)
        model = cpuinfo.substr(colon + 2, end - colon - 2);
    }
  } catch (const Error&) {
  }
  return {{"hostname", host},
          {"kernel", std::string(u.sysname) + " " + u.release},
          {"arch", u.machine},
          {"cpu_model", model},
          {"cores", std::thread::hardware_concurrency()},
          {"memory_bytes",
           pages > 0 && page > 0 ? static_cast<uint64_t>(pages) * static_cast<uint64_t>(page) : 0}};
}

}  // namespace kev
