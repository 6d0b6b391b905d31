// kev bench's client side (kev/acceptance/bench_client.h): URL rule, the pass driver over a
// counting target, and HttpTarget against a minimal HTTP/1.1 server on a loopback socket that
// closes each connection after one answer without saying so (the kept-alive retry).
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <mutex>
#include <set>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "kev/acceptance/bench_client.h"
#include "kev/core/error.h"

namespace kev {
namespace {

ErrorKind url_refusal(const std::string& url) {
  try {
    parse_bench_url(url);
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("--url"), std::string::npos) << e.what();
    return e.kind();
  }
  return ErrorKind::kInternal;  // accepted
}

TEST(BenchUrl, HostPortAndPathByTheDocumentedRule) {
  BenchUrl u = parse_bench_url("http://127.0.0.1:8080");
  EXPECT_EQ(u.host, "127.0.0.1");
  EXPECT_EQ(u.port, "8080");
  EXPECT_EQ(u.path, "/v1/systemone");
  u = parse_bench_url("http://example.test/v1/systemone/separate");
  EXPECT_EQ(u.host, "example.test");
  EXPECT_EQ(u.port, "80");
  EXPECT_EQ(u.path, "/v1/systemone/separate");
  EXPECT_EQ(parse_bench_url("http://h:1/").path, "/v1/systemone");
  EXPECT_EQ(parse_bench_url("http://h:65535").port, "65535");
  EXPECT_EQ(url_refusal("https://h:443"), ErrorKind::kUnsupported);
  for (const char* bad :
       {"h:80", "ftp://h", "http://", "http://:80", "http://h:0", "http://h:65536", "http://h:-1",
        "http://h:8o", "http://h:123456", "http://h:"})
    EXPECT_EQ(url_refusal(bad), ErrorKind::kBadInput) << bad;
}

TEST(BenchClient, AnswerInputTokens) {
  EXPECT_EQ(answer_input_tokens(R"({"usage": {"input_tokens": 41, "output_tokens": 3}})"), 41u);
  EXPECT_EQ(answer_input_tokens(R"({"usage": {"input_tokens": -1}})"), 0u);
  EXPECT_EQ(answer_input_tokens(R"({"usage": 5})"), 0u);
  EXPECT_EQ(answer_input_tokens("not json"), 0u);
}

// Answers body "<index>" with status 200 + index; counts sends per request and the workers seen.
class CountingTarget : public BenchTarget {
 public:
  explicit CountingTarget(size_t n, long throw_at = -1) : sends_(n), throw_at_(throw_at) {}
  void prepare(size_t workers) override { prepared_ = workers; }
  BenchReply send(size_t worker, const std::string& body) override {
    const size_t i = std::stoul(body);
    if (static_cast<long>(i) == throw_at_) throw std::runtime_error("target failed");
    sends_.at(i).fetch_add(1);
    if (throw_at_ >= 0) std::this_thread::sleep_for(std::chrono::milliseconds(1));
    {
      std::lock_guard<std::mutex> lock(mutex_);
      workers_.insert(worker);
    }
    BenchReply r;
    r.outcome.status = 200 + static_cast<int>(i);
    r.body = body;
    return r;
  }
  std::vector<std::atomic<int>> sends_;
  std::set<size_t> workers_;
  size_t prepared_ = 0;

 private:
  long throw_at_;
  std::mutex mutex_;
};

TEST(BenchPass, EveryRequestOnceRepliesInOrderWithinTheConcurrency) {
  std::vector<BenchRequest> requests;
  for (size_t i = 0; i < 40; ++i) requests.push_back({std::to_string(i), std::to_string(i)});
  std::vector<size_t> order;
  for (size_t k = 0; k < 2; ++k)  // two rounds, the second reversed
    for (size_t i = 0; i < 40; ++i) order.push_back(k == 0 ? i : 39 - i);
  for (size_t concurrency : {1, 3, 8, 100}) {
    CountingTarget t(requests.size());
    double wall = -1;
    const std::vector<BenchReply> replies =
        run_bench_pass(t, requests, order, concurrency, "test", false, &wall);
    ASSERT_EQ(replies.size(), order.size());
    for (size_t i = 0; i < order.size(); ++i) {
      EXPECT_EQ(replies[i].outcome.status, 200 + static_cast<int>(order[i])) << i;
      EXPECT_EQ(replies[i].body, std::to_string(order[i])) << i;
    }
    for (const auto& n : t.sends_) EXPECT_EQ(n.load(), 2);
    EXPECT_EQ(t.prepared_, concurrency);
    EXPECT_LE(t.workers_.size(), std::min<size_t>(concurrency, order.size()));
    EXPECT_LT(*t.workers_.rbegin(), concurrency);
    EXPECT_GE(wall, 0);
  }
}

TEST(BenchPass, AWorkersExceptionStopsThePassAndIsRethrown) {
  std::vector<BenchRequest> requests;
  for (size_t i = 0; i < 1000; ++i) requests.push_back({std::to_string(i), std::to_string(i)});
  std::vector<size_t> order(requests.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  CountingTarget t(requests.size(), 5);
  double wall = 0;
  EXPECT_THROW(run_bench_pass(t, requests, order, 4, "test", false, &wall), std::runtime_error);
  size_t sent = 0;
  for (const auto& n : t.sends_) sent += static_cast<size_t>(n.load());
  // Without the stop the other workers would send all 999 others (~250 ms at 1 ms each); with it
  // each sends at most what it had taken when the failure was seen.
  EXPECT_LT(sent, 100u);
}

// A loopback HTTP/1.1 server: each connection gets one answer (200, a usage body, no
// "Connection: close") and is then closed, so a client's second request on it finds it gone.
class OneShotServer {
 public:
  OneShotServer() {
    fd_ = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    EXPECT_EQ(::bind(fd_, reinterpret_cast<sockaddr*>(&a), sizeof a), 0);
    EXPECT_EQ(::listen(fd_, 16), 0);
    socklen_t len = sizeof a;
    ::getsockname(fd_, reinterpret_cast<sockaddr*>(&a), &len);
    port_ = ntohs(a.sin_port);
    thread_ = std::thread([this] { serve(); });
  }
  ~OneShotServer() {
    stop_ = true;
    ::shutdown(fd_, SHUT_RDWR);
    ::close(fd_);
    thread_.join();
  }
  int port() const { return port_; }
  int answered() const { return answered_.load(); }

 private:
  void serve() {
    while (!stop_) {
      const int c = ::accept(fd_, nullptr, nullptr);
      if (c < 0) return;
      std::string in;
      char buf[4096];
      size_t need = std::string::npos;
      while (true) {
        const ssize_t n = ::recv(c, buf, sizeof buf, 0);
        if (n <= 0) break;
        in.append(buf, static_cast<size_t>(n));
        const size_t end = in.find("\r\n\r\n");
        if (end != std::string::npos && need == std::string::npos) {
          size_t length = 0;
          const size_t at = in.find("Content-Length: ");
          if (at != std::string::npos && at < end) length = std::stoul(in.substr(at + 16));
          need = end + 4 + length;
        }
        if (need != std::string::npos && in.size() >= need) break;
      }
      const std::string body = R"({"usage": {"input_tokens": 12, "output_tokens": 3}})";
      const std::string reply =
          "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
          "Content-Length: " +
          std::to_string(body.size()) + "\r\n\r\n" + body;
      if (need != std::string::npos) {
        // Counted before it is sent: the client can read the reply (and the test check the
        // count) before this thread would run again after send().
        answered_.fetch_add(1);
        ::send(c, reply.data(), reply.size(), MSG_NOSIGNAL);
      }
      ::close(c);
    }
  }

  int fd_ = -1, port_ = 0;
  std::atomic<bool> stop_{false};
  std::atomic<int> answered_{0};
  std::thread thread_;
};

TEST(HttpTarget, RetriesOnceOnAFreshConnectionWhenAKeptAliveOneWasClosed) {
  OneShotServer server;
  HttpTarget t(parse_bench_url("http://127.0.0.1:" + std::to_string(server.port())), "k", 30);
  t.prepare(1);
  for (int i = 0; i < 3; ++i) {
    const BenchReply r = t.send(0, R"({"state": "s"})");
    EXPECT_EQ(r.outcome.status, 200) << r.body;
    EXPECT_EQ(r.outcome.input_tokens, 12u);
    EXPECT_GE(r.outcome.latency_ms, 0);
  }
  EXPECT_EQ(server.answered(), 3);
}

TEST(HttpTarget, NoServerIsStatusZeroWithADetail) {
  int port = 0;
  {
    OneShotServer gone;  // a port that was just free, now closed again
    port = gone.port();
  }
  HttpTarget t(parse_bench_url("http://127.0.0.1:" + std::to_string(port)), "", 5);
  t.prepare(1);
  const BenchReply r = t.send(0, "{}");
  EXPECT_EQ(r.outcome.status, 0);
  EXPECT_NE(r.body.find("no HTTP answer"), std::string::npos) << r.body;
}

}  // namespace
}  // namespace kev
