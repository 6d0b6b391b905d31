// One I/O thread runs every connection (Asio, non-blocking), so slow or idle clients cost a
// socket and a few KiB, never a thread. Scoring runs on max_inflight worker threads fed by a FIFO
// queue; finished work is posted back to the I/O thread, which alone touches connection state.
// Beast parses HTTP; the checks Beast leaves to the application (duplicate framing headers,
// unknown transfer codings, Content-Encoding, Expect, header count, target form) are done here.
#include "kev/serve/http_server.h"

#include <fcntl.h>
#include <malloc.h>
#include <poll.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include <array>
#include <atomic>
#include <boost/asio.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <cerrno>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <ctime>
#include <deque>
#include <functional>
#include <limits>
#include <mutex>
#include <new>
#include <optional>
#include <thread>
#include <unordered_set>
#include <variant>
#include <vector>

#include "kev/core/error.h"
#include "kev/core/file.h"
#include "kev/core/sha256.h"
#include "kev/serve/metrics.h"
#include "kev/serve/openapi.h"
#include "kev/serve/request_id.h"
#include "kev/text/date_facts.h"

namespace kev {
namespace {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using tcp = asio::ip::tcp;
using Clock = std::chrono::steady_clock;

// Upstream's MODEL_NAMES: both serve this bundle; jev-latest is the TypeSafe SDK's default.
constexpr const char* kModelNames[] = {"kev-latest", "jev-latest"};
// Starlette's CORSMiddleware with allow_methods=["*"] (upstream kev/serve.py).
constexpr const char* kCorsMethods[] = {"DELETE", "GET", "HEAD", "OPTIONS", "PATCH", "POST", "PUT"};
constexpr size_t kLingerBytes = 1 << 20;  // discarded after an error reply before closing
constexpr auto kLingerTime = std::chrono::seconds(2);
constexpr size_t kExtraRejecting = 64;  // connections answered 503 beyond max_connections
// Kernel send buffer per connection (Linux doubles it). Left to autotuning, a client that pipelines
// requests and never reads made the kernel take ~4 MiB of replies per connection: 300 such
// connections, 12 KB of requests, 1.2 GB of kernel memory and a 4 s stall of the I/O thread copying
// them. Replies are small (the largest, /openapi.json, is ~52 KB), so this costs nothing else.
constexpr int kSendBufferBytes = 64 * 1024;
constexpr size_t kTrimAfterBytes = 1 << 20;
constexpr auto kEvictIdleAfter = std::chrono::milliseconds(
    100);  // see idle_between_requests()  // bodies in a batch after which memory is returned

std::chrono::steady_clock::duration seconds(double s) {
  return std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(s));
}

// Raw request bytes as printable ASCII (others as %XX, capped), so that neither a log line nor
// a JSON string in a reply can be forged or made invalid UTF-8 by what a client sent.
std::string printable(std::string_view s, size_t max = 256) {
  std::string out;
  for (unsigned char c : s.substr(0, max)) {
    if (c > 0x20 && c < 0x7f && c != '%' && c != '"' && c != '\\') {
      out += static_cast<char>(c);
    } else {
      out += fmt::format("%{:02X}", c);
    }
  }
  if (s.size() > max) out += "...";
  return out;
}

// What a scored request cost, for its log line.
struct Scored {
  ScoreUsage usage;
  size_t questions = 0;
  size_t batch = 1;  // requests in the model pass that scored it
};

struct Reply {
  int status = 200;
  std::string body;
  std::string content_type = "application/json";
  std::vector<std::pair<std::string, std::string>> headers;  // extra fields, in order
  bool preflight = false;        // a CORS preflight answer: carries its own Access-Control-* fields
  std::optional<Scored> scored;  // a 200 from POST /v1/systemone
  bool retry_after = false;
  std::string allow;
  bool close = false;      // framing can no longer be trusted: close after this reply
  bool cancelled = false;  // the client reset the connection: no reply, close
  double queue_ms = -1;    // time the request waited for a scoring slot (< 0: not queued)
};

Reply json_reply(int status, const OrderedJson& body) {
  Reply r;
  r.status = status;
  r.body = body.dump();
  return r;
}

Reply detail(int status, const std::string& message, bool close = false) {
  Reply r = json_reply(status, OrderedJson{{"detail", message}});
  r.retry_after = status == 503;
  r.close = close;
  return r;
}

// The POST endpoints that go through admission.
enum class Endpoint { kSystemOne, kPermute, kSeparate };

// One POST /v1/systemone[/permute|/separate] in the admission queue.
struct ScoreTask {
  Endpoint endpoint = Endpoint::kSystemOne;
  Clock::time_point queued_at;
  std::shared_ptr<const std::string> body;
  int fd = -1;  // the client's socket, polled for a reset (peer_reset)
  // On a worker thread, with the task's reply (or cancelled); returns what sends it, to be run
  // once the request no longer counts as in flight.
  std::function<std::function<void()>(Reply)> reply;
};

// FIFO admission: max_inflight worker threads each take up to max_batch jobs from the front of
// the queue (what is there when the worker is free; it never waits for more) and score them in
// one pass; at most max_queue wait. A job waiting longer than its deadline is expired (answered
// 503) by a sweeper thread, or by the worker that finds it expired, so a long-running pass never
// makes the queued ones wait past their deadline.
class Admission {
 public:
  struct Job {
    Clock::time_point deadline;
    std::shared_ptr<ScoreTask> task;
    std::function<void()> expire;  // on the sweeper or a worker thread
  };
  // On a worker thread: scores the tasks of one batch (FIFO order) and returns, per task, what
  // sends its reply (run once the batch is no longer counted in flight).
  using Runner = std::function<std::vector<std::function<void()>>(
      const std::vector<std::shared_ptr<ScoreTask>>&)>;

  Admission(size_t max_inflight, size_t max_queue, size_t max_batch, Clock::duration wait)
      : max_inflight_(max_inflight), max_queue_(max_queue), max_batch_(max_batch), wait_(wait) {}

  void start(Runner runner) {
    runner_ = std::move(runner);
    for (size_t i = 0; i < max_inflight_; ++i) threads_.emplace_back([this] { work(); });
    threads_.emplace_back([this] { sweep(); });
  }

  // false: full (the caller answers 503 at once). A worker that is free takes the job at once;
  // beyond the busy workers, at most max_queue jobs wait.
  bool submit(std::shared_ptr<ScoreTask> task, std::function<void()> expire) {
    {
      std::lock_guard lock(mutex_);
      if (busy_ + queue_.size() >= max_inflight_ + max_queue_) return false;
      queue_.push_back(Job{Clock::now() + wait_, std::move(task), std::move(expire)});
    }
    work_cv_.notify_one();
    sweep_cv_.notify_one();
    return true;
  }

  // {requests scoring (every request of every batch in progress), requests waiting}
  std::pair<size_t, size_t> counts() const {
    std::lock_guard lock(mutex_);
    return {inflight_, queue_.size()};
  }

  // Runs every job still queued, then joins the threads.
  void stop() {
    {
      std::lock_guard lock(mutex_);
      stopping_ = true;
    }
    work_cv_.notify_all();
    sweep_cv_.notify_all();
    for (auto& t : threads_) t.join();
    threads_.clear();
  }

 private:
  void work() {
    std::unique_lock lock(mutex_);
    for (;;) {
      work_cv_.wait(lock, [&] { return stopping_ || !queue_.empty(); });
      if (queue_.empty()) return;
      // The oldest jobs, up to max_batch not yet expired; expired ones met on the way get 503.
      std::vector<std::shared_ptr<ScoreTask>> batch;
      std::vector<std::function<void()>> expired;
      const auto now = Clock::now();
      // Only /v1/systemone requests share a pass: permute and separate run several passes of
      // their own, so each is taken alone (the requests behind it stay queued, under their own
      // deadlines, instead of waiting inside its batch).
      while (!queue_.empty() && batch.size() < max_batch_) {
        Job& job = queue_.front();
        if (now > job.deadline) {
          expired.push_back(std::move(job.expire));
          queue_.pop_front();
          continue;
        }
        const bool alone = job.task->endpoint != Endpoint::kSystemOne;
        if (!batch.empty() && (alone || batch.front()->endpoint != Endpoint::kSystemOne)) break;
        batch.push_back(std::move(job.task));
        queue_.pop_front();
        if (alone) break;
      }
      const size_t n = batch.size();
      size_t body_bytes = 0;
      for (const auto& t : batch) body_bytes += t->body ? t->body->size() : 0;
      inflight_ += n;
      ++busy_;
      lock.unlock();
      for (auto& e : expired) guarded("expiring a queued request", e);
      expired.clear();
      std::vector<std::function<void()>> then;
      if (n > 0) guarded("scoring a batch", [&] { then = runner_(batch); });
      batch.clear();
      lock.lock();
      inflight_ -= n;
      --busy_;
      lock.unlock();
      for (auto& t : then) guarded("sending a reply", t);
      then.clear();
      // A big body (and its tokens) leaves freed pages in this thread's and the I/O thread's
      // malloc arenas; glibc keeps them, so RSS would stay at its high-water mark (347 MiB
      // after bursts of 4 MiB bodies, against 13 once they are returned).
      if (body_bytes >= kTrimAfterBytes) malloc_trim(0);
      lock.lock();
    }
  }

  void sweep() {
    std::unique_lock lock(mutex_);
    while (!stopping_) {
      if (queue_.empty()) {
        sweep_cv_.wait(lock);
        continue;
      }
      if (Clock::now() <= queue_.front().deadline) {
        sweep_cv_.wait_until(lock, queue_.front().deadline);
        continue;
      }
      Job job = std::move(queue_.front());
      queue_.pop_front();
      lock.unlock();
      guarded("expiring a queued request", job.expire);
      job = {};
      lock.lock();
    }
  }

  // Runs f on a worker or the sweeper; an exception (only out of memory can get here: the runner
  // turns every scoring error into a reply) is logged instead of ending the thread.
  template <class F>
  static void guarded(const char* what, F&& f) {
    try {
      f();
    } catch (const std::exception& e) {
      std::fprintf(stderr, "kev serve: internal error while %s: %s\n", what, e.what());
    } catch (...) {
      std::fprintf(stderr, "kev serve: internal error while %s\n", what);
    }
  }

  const size_t max_inflight_, max_queue_, max_batch_;
  const Clock::duration wait_;
  Runner runner_;
  mutable std::mutex mutex_;
  std::condition_variable work_cv_, sweep_cv_;
  std::deque<Job> queue_;
  size_t inflight_ = 0;  // requests in the batches being scored
  size_t busy_ = 0;      // workers scoring a batch
  bool stopping_ = false;
  std::vector<std::thread> threads_;
};

// stderr lines written by a thread of their own, so that a stderr nobody reads (a pipe whose
// reader never reads: full after 64 KiB, ~1,700 request lines) never blocks the I/O thread: it
// did, and the whole server stalled, SIGTERM included. Beyond kLogQueueBytes waiting, lines are
// dropped and counted, and the count is written once stderr takes lines again.
class LogSink {
 public:
  LogSink() : thread_([this] { run(); }) {}
  ~LogSink() { stop(); }

  void line(std::string text) {
    text += '\n';
    {
      std::lock_guard lock(mutex_);
      if (stopped_ || queued_ + text.size() > kLogQueueBytes) {
        ++dropped_;
        return;
      }
      queued_ += text.size();
      lines_.push_back(std::move(text));
    }
    cv_.notify_one();
  }

  // Writes what is queued, for at most `grace` if stderr does not take it, then ends the thread.
  void stop(Clock::duration grace = std::chrono::seconds(1)) {
    {
      std::lock_guard lock(mutex_);
      if (!stopping_) give_up_at_.store((Clock::now() + grace).time_since_epoch().count());
      stopping_ = true;
    }
    cv_.notify_one();
    if (thread_.joinable()) thread_.join();
  }

 private:
  static constexpr size_t kLogQueueBytes = 1 << 20;

  void run() {
    std::unique_lock lock(mutex_);
    for (;;) {
      cv_.wait(lock, [&] { return stopping_ || !lines_.empty(); });
      if (lines_.empty() && dropped_ == 0) break;
      std::deque<std::string> batch;
      batch.swap(lines_);
      queued_ = 0;
      const size_t dropped = std::exchange(dropped_, 0);
      lock.unlock();
      bool ok = true;
      if (dropped > 0)
        ok = write_all(
            fmt::format("kev serve: {} log lines dropped: stderr was not being read\n", dropped));
      for (const std::string& text : batch) ok = ok && write_all(text);
      lock.lock();
      if (!ok && stopping_ && past_grace()) break;  // stderr still blocked at exit: give up
    }
    stopped_ = true;
  }

  bool past_grace() const { return Clock::now().time_since_epoch().count() >= give_up_at_.load(); }

  // false: stderr failed, or stayed full past the grace time at exit (the text is dropped).
  bool write_all(std::string_view text) {
    while (!text.empty()) {
      pollfd p{STDERR_FILENO, POLLOUT, 0};
      const int ready = ::poll(&p, 1, 100);
      if (ready < 0 && errno != EINTR) return false;
      if (ready <= 0) {
        if (give_up_at_.load() != kNever && past_grace()) return false;
        continue;
      }
      if (p.revents & (POLLERR | POLLNVAL)) return false;
      // Writable: a pipe has at least a page free, and a line is shorter, so this does not block.
      const ssize_t n = ::write(STDERR_FILENO, text.data(), text.size());
      if (n < 0) {
        if (errno == EINTR || errno == EAGAIN) continue;
        return false;  // EPIPE (reader gone), EBADF: nobody will read it
      }
      text.remove_prefix(static_cast<size_t>(n));
    }
    return true;
  }

  static constexpr Clock::rep kNever = std::numeric_limits<Clock::rep>::max();
  std::mutex mutex_;
  std::condition_variable cv_;
  std::deque<std::string> lines_;
  size_t queued_ = 0, dropped_ = 0;
  bool stopping_ = false, stopped_ = false;
  std::atomic<Clock::rep> give_up_at_{kNever};
  std::thread thread_;  // last: started once the members above exist
};

// A peer that reset the connection (RST) will never read an answer. A FIN alone is not taken as
// "gone": RFC 9112 allows a client to half-close after sending its request and still read.
bool peer_reset(int fd) {
  pollfd p{fd, POLLIN, 0};
  if (::poll(&p, 1, 0) <= 0) return false;
  return (p.revents & (POLLERR | POLLHUP)) != 0;
}

bool iequals(std::string_view a, std::string_view b) {
  return beast::iequals(beast::string_view(a.data(), a.size()),
                        beast::string_view(b.data(), b.size()));
}

std::string_view trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t')) s.remove_suffix(1);
  return s;
}

// The path of a request target without its query: origin-form ("/p?q") as is, absolute-form
// ("http://host/p?q", which RFC 9112 3.2.2 says a server MUST accept) from its path ("/" when
// empty). nullopt for any other form (authority-form of CONNECT, asterisk-form "*", garbage).
std::optional<std::string_view> target_path(std::string_view target) {
  if (target.empty()) return std::nullopt;
  if (target[0] != '/') {
    const size_t scheme = target.find("://");
    if (scheme == std::string_view::npos ||
        !(iequals(target.substr(0, scheme), "http") || iequals(target.substr(0, scheme), "https")))
      return std::nullopt;
    target.remove_prefix(scheme + 3);
    const size_t end = target.find_first_of("/?#");
    if (end == 0) return std::nullopt;  // no authority
    if (end == std::string_view::npos || target[end] != '/') return std::string_view("/");
    target.remove_prefix(end);
  }
  return target.substr(0, target.find('?'));
}

// Why a body that nlohmann::json::accept refused is not JSON, for its 400: where and what ("not
// valid JSON" alone is false for 1e400, which is valid JSON whose value no double holds). Only
// called on the refusal path; the library's message is cut to its reason and kept to printable
// ASCII, since its "last read" part echoes client bytes.
std::string json_syntax_error(const std::string& body) {
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
      std::string_view what = e.what();
      if (auto colon = what.find(": ");
          what.find("parse error at") != std::string_view::npos && colon != std::string_view::npos)
        what.remove_prefix(colon + 2);  // "[json.exception...] parse error at line 1, column 5: "
      else if (auto bracket = what.find("] "); bracket != std::string_view::npos)
        what.remove_prefix(bracket + 2);
      what = what.substr(0, what.find("; last read"));
      for (char c : what.substr(0, 160)) reason += c >= 0x20 && c < 0x7f ? c : '?';
      return false;
    }
  } handler;
  nlohmann::json::sax_parse(body, &handler);
  if (handler.reason.empty()) return "the request body is not valid JSON";
  return fmt::format("the request body is not valid JSON (byte {}: {})", handler.at,
                     handler.reason);
}

enum class Lifecycle { kLoading, kReady, kDraining };

std::vector<std::string> route_names();  // the paths of kRoutes (below), for metric labels

bool printable_ascii(std::string_view s) {
  for (unsigned char c : s)
    if (c < 0x20 || c > 0x7e) return false;
  return true;
}

std::string utc_date(const std::string& path) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) fail(ErrorKind::kIo, "cannot stat {}", path);
  std::tm tm{};
  gmtime_r(&st.st_mtime, &tm);
  char buf[16];
  std::strftime(buf, sizeof(buf), "%Y-%m-%d", &tm);
  return buf;
}

}  // namespace

class Connection;

struct HttpServer::Impl : std::enable_shared_from_this<HttpServer::Impl> {
  ServeOptions options;
  LogSink log;  // every stderr line of the server
  asio::io_context io{1};
  tcp::acceptor acceptor{io};
  std::optional<asio::executor_work_guard<asio::io_context::executor_type>> guard;
  std::thread io_thread;
  Admission admission;
  mutable ServeMetrics metrics{route_names()};  // thread-safe (atomic counters)
  const std::string openapi = openapi_document();
  Clock::time_point started_at = Clock::now();  // start(): model load time is measured from it
  std::atomic<Lifecycle> lifecycle{Lifecycle::kLoading};
  std::atomic<const Scorer*> scorer{nullptr};
  BundleInfo bundle;  // written before scorer is published, read after it is seen
  const std::string& model = bundle.model;
  std::array<uint8_t, 32> auth_digest{};  // SHA-256 of "Bearer <api_key>"
  bool started = false, waited = false;

  // I/O thread only.
  bool accepting = true;
  std::unordered_set<Connection*> connections;
  size_t rejecting = 0;
  size_t extra_rejecting = std::min(kExtraRejecting, options.max_connections);
  // Held so that a connection can still be taken and answered when the process is out of file
  // descriptors (accept_failed); reopened whenever a connection closes.
  int spare_fd = -1;
  size_t accept_failures = 0;
  Clock::time_point accept_logged{};
  size_t body_bytes = 0;  // reserved by requests being read, queued or scoring

  // Model passes (batches scored together) and the requests in them; any thread.
  mutable std::atomic<uint64_t> passes{0}, batched{0};
  mutable std::atomic<size_t> largest_batch{0};
  asio::steady_timer accept_retry{io};

  explicit Impl(ServeOptions o)
      : options(std::move(o)),
        admission(options.max_inflight, options.max_queue, options.max_batch,
                  seconds(options.queue_timeout_s)) {
    if (!options.api_key.empty()) {
      const std::string expected = "Bearer " + options.api_key;
      Sha256 h;
      h.update(expected.data(), expected.size());
      auth_digest = h.digest();
    }
  }
  ~Impl() {
    if (spare_fd >= 0) ::close(spare_fd);
  }

  void accept();
  void accept_failed(beast::error_code ec);
  // A new client: admitted, or room made for it, or answered 503 (out_of_fds: it holds the
  // spare descriptor, so room is made even under the connection cap).
  void admit(tcp::socket socket, bool out_of_fds);
  void reopen_spare();
  // A 503 written at once on a socket that does not become a connection.
  void refuse_now(tcp::socket& socket);
  void on_shutdown();
  void connection_closed(Connection* c);
  void maybe_finish() {
    if (!accepting && connections.empty() && rejecting == 0) guard.reset();
  }

  // Counts one model pass of `requests` requests scored together (/health, /v1/models, and
  // ServeOptions::on_batch for /metrics).
  void count_pass(size_t requests) const {
    passes.fetch_add(1);
    batched.fetch_add(requests);
    for (size_t was = largest_batch.load(); was < requests;)
      if (largest_batch.compare_exchange_weak(was, requests)) break;
    metrics.batch(requests);
    if (options.on_batch) options.on_batch(requests);
  }

  // On a worker thread: the JSON path for one POST /v1/systemone body, a request to score or
  // the reply refusing it. Any "model" string is accepted and echoed (upstream: both names and
  // any other serve the one checkpoint).
  std::variant<ApiRequest, Reply> parse(const std::string& body) const {
    // Syntax first (linear, builds nothing), so that every later refusal is a 422.
    if (!nlohmann::json::accept(body)) return detail(400, json_syntax_error(body));
    try {
      OrderedJson json = parse_json_strict(body, "the request body", options.json);
      if (options.date_facts) add_date_facts(json);
      return request_from_json(json);
    } catch (...) {
      return error_reply(std::current_exception(), {});
    }
  }

  // On a worker thread: upstream's demo endpoints (permute, separate), each request on its own:
  // its single-question passes run one after the other, not batched with other requests.
  Reply score_alone(Endpoint endpoint, const std::string& body,
                    const std::function<bool()>& gone) const {
    if (!nlohmann::json::accept(body)) return detail(400, json_syntax_error(body));
    try {
      const Scorer& s = *scorer.load();
      OrderedJson json = parse_json_strict(body, "the request body", options.json);
      if (endpoint == Endpoint::kPermute) {
        if (options.date_facts && json.is_object())
          if (auto r = json.find("request"); r != json.end()) add_date_facts(*r);
        PermuteRequest p = permute_request_from_json(json);
        Reply r = json_reply(200, s.permute(p, gone));
        for (int i = 0; i < p.n_perm; ++i) count_pass(1);
        return r;
      }
      if (options.date_facts) add_date_facts(json);
      ApiRequest request = request_from_json(json);
      Reply r = json_reply(200, s.separate(request, gone));
      for (size_t i = 0; i < request.questions.size(); ++i) count_pass(1);
      return r;
    } catch (...) {
      return error_reply(std::current_exception(), gone);
    }
  }

  // The reply to a request whose parsing or scoring threw `error`.
  static Reply error_reply(std::exception_ptr error, const std::function<bool()>& gone) {
    try {
      std::rethrow_exception(error);
    } catch (const Error& e) {
      if (e.kind() == ErrorKind::kInterrupted && gone && gone()) {
        Reply r;
        r.cancelled = true;
        return r;
      }
      return detail(http_status(e.kind()), e.what());
    } catch (const std::bad_alloc&) {
      return detail(503, "out of memory while scoring this request; retry later");
    } catch (const std::exception& e) {
      return detail(500, fmt::format("internal error: {}", e.what()));
    } catch (...) {
      return detail(500, "internal error");
    }
  }

  // On a worker thread: one batch taken from the queue, in FIFO order. Each task is checked
  // for a reset client and parsed on its own, then the requests left are scored together
  // (Scorer::score_batch: their rows in one model pass); every task gets its own reply.
  std::vector<Reply> score_batch(const std::vector<std::shared_ptr<ScoreTask>>& tasks) const {
    std::vector<Reply> replies(tasks.size());
    // Each task's wait in the queue ends here; recorded for /metrics and its log line.
    std::vector<double> waited_ms(tasks.size());
    for (size_t i = 0; i < tasks.size(); ++i) {
      const double waited =
          std::chrono::duration<double>(Clock::now() - tasks[i]->queued_at).count();
      metrics.queue_wait(waited);
      waited_ms[i] = waited * 1000;
    }
    score_tasks(tasks, replies);
    for (size_t i = 0; i < tasks.size(); ++i) replies[i].queue_ms = waited_ms[i];
    return replies;
  }

  // score_batch's work: every task's reply in `replies`.
  void score_tasks(const std::vector<std::shared_ptr<ScoreTask>>& tasks,
                   std::vector<Reply>& replies) const {
    std::vector<std::optional<ApiRequest>> requests(tasks.size());
    std::vector<ScoreJob> jobs;
    std::vector<size_t> of;  // jobs[k] is tasks[of[k]]
    for (size_t i = 0; i < tasks.size(); ++i) {
      const int fd = tasks[i]->fd;
      if (peer_reset(fd)) {  // reset while queued: nothing is computed for it
        replies[i].cancelled = true;
        continue;
      }
      if (tasks[i]->endpoint != Endpoint::kSystemOne) {
        replies[i] =
            score_alone(tasks[i]->endpoint, *tasks[i]->body, [fd] { return peer_reset(fd); });
        continue;
      }
      auto parsed = parse(*tasks[i]->body);
      if (Reply* refused = std::get_if<Reply>(&parsed)) {
        replies[i] = std::move(*refused);
        continue;
      }
      requests[i].emplace(std::move(std::get<ApiRequest>(parsed)));
      jobs.push_back(ScoreJob{&*requests[i], [fd] { return peer_reset(fd); }});
      of.push_back(i);
    }
    if (jobs.empty()) return;
    std::vector<ScoreOutcome> outcomes;
    try {
      outcomes = scorer.load()->score_batch(jobs);
    } catch (...) {  // the batch's own bookkeeping failed (out of memory): each gets the error
      auto error = std::current_exception();
      for (size_t k = 0; k < jobs.size(); ++k) replies[of[k]] = error_reply(error, jobs[k].gone);
      return;
    }
    // The pass counts the requests it answered (as upstream counts batches run): a request
    // refused in its own encoding or cancelled was not part of it.
    size_t answered = 0;
    for (const ScoreOutcome& o : outcomes) answered += o.error ? 0 : 1;
    if (answered > 0) count_pass(answered);
    for (size_t k = 0; k < jobs.size(); ++k) {
      if (outcomes[k].error) {
        replies[of[k]] = error_reply(outcomes[k].error, jobs[k].gone);
        continue;
      }
      const ScoreUsage& u = outcomes[k].result.usage;
      const size_t questions = jobs[k].request->questions.size();
      metrics.scored(u.state_tokens, u.input_tokens - u.state_tokens, questions, u.cached_tokens);
      Reply& r = replies[of[k]] = json_reply(200, outcomes[k].result.response);
      r.scored = Scored{u, questions, answered};
    }
  }

  OrderedJson health() const {
    auto [inflight, queued] = admission.counts();
    const Lifecycle l = lifecycle.load();
    const Scorer* s = scorer.load();
    OrderedJson out = {{"status", l == Lifecycle::kReady     ? "ok"
                                  : l == Lifecycle::kLoading ? "loading"
                                                             : "draining"},
                       {"ready", l == Lifecycle::kReady},
                       {"model", s ? OrderedJson(model) : OrderedJson()},
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
    } else {
      out["cache"] = nullptr;
    }
    out["batches"] = {{"max_batch", options.max_batch},
                      {"passes", passes.load()},
                      {"requests", batched.load()},
                      {"largest", largest_batch.load()}};
    return out;
  }

  Reply ready_reply() const {
    const Lifecycle l = lifecycle.load();
    if (l == Lifecycle::kReady) return json_reply(200, {{"status", "ready"}, {"model", model}});
    Reply r = json_reply(503, {{"status", l == Lifecycle::kLoading ? "loading" : "draining"}});
    r.retry_after = true;
    return r;
  }

  static const char* lifecycle_name(Lifecycle l) {
    return l == Lifecycle::kReady ? "ready" : l == Lifecycle::kLoading ? "loading" : "draining";
  }

  // On the I/O thread (connections is read here).
  Reply metrics_reply() const {
    MetricsSnapshot now;
    std::tie(now.inflight, now.queued) = admission.counts();
    now.connections = connections.size();
    now.lifecycle = lifecycle_name(lifecycle.load());
    if (const Scorer* s = scorer.load()) {
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
    }
    Reply r;
    r.body = metrics.render(now);
    r.content_type = kMetricsContentType;
    return r;
  }

  // KEV_DATE_FACTS: the request's state with upstream's date facts (a body that is no object
  // or has no state is left for request_from_json to refuse).
  static void add_date_facts(OrderedJson& request) {
    if (!request.is_object()) return;
    if (auto st = request.find("state"); st != request.end()) *st = with_date_facts(*st);
  }

  // "Authorization: Bearer <key>" exactly, as upstream's hmac.compare_digest: both sides
  // hashed to fixed-size digests, compared with no branch on their bytes.
  bool authorized(const http::request<http::string_body>& req) const {
    auto it = req.find(http::field::authorization);
    const std::string_view got = it == req.end()
                                     ? std::string_view()
                                     : std::string_view(it->value().data(), it->value().size());
    Sha256 h;
    h.update(got.data(), got.size());
    const std::array<uint8_t, 32> a = h.digest();
    uint8_t diff = 0;
    for (size_t i = 0; i < a.size(); ++i) diff |= static_cast<uint8_t>(a[i] ^ auth_digest[i]);
    return diff == 0;
  }

  // Upstream's GET /v1/models: one TypeSafe card (name, description, release_date) per
  // accepted name, plus serving details a client may ignore.
  OrderedJson models() const {
    const Scorer& s = *scorer.load();
    const ScorerOptions& o = s.options();
    const auto& cache = s.cache();
    auto [inflight, queued] = admission.counts();
    (void)inflight;
    OrderedJson card = {
        {"description", fmt::format("Kev pointer head on {}, serving {} at temperature {:.2f}",
                                    bundle.base, bundle.run, s.head().temperature())},
        {"release_date", bundle.release_date},
        {"run", bundle.run},
        {"base", bundle.base},
        {"lora", bundle.lora_rank},
        {"device", "cpu"},
        {"backend", "kev-native"},
        {"dtype", "bfloat16"},
        {"temperature", s.head().temperature()},
        {"bundle_temperature", bundle.temperature},
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
        {"batches", {{"count", passes.load()}, {"requests", batched.load()}, {"queued", queued}}},
        {"bundle_model", bundle.model}};
    OrderedJson list = OrderedJson::array();
    for (const char* name : kModelNames) {
      OrderedJson one = {{"name", name}};
      one.update(card);
      list.push_back(std::move(one));
    }
    return {{"models", std::move(list)}};
  }
};

namespace {

using Request = http::request<http::string_body>;

// A route's answer when it needs no scoring; nullopt: POST /v1/systemone to be scored.
struct Route {
  const char* path;
  http::verb method;
};
// One route a line (clang-format would fill columns).
// clang-format off
constexpr Route kRoutes[] = {{"/v1/systemone", http::verb::post},
                             {"/v1/systemone/permute", http::verb::post},
                             {"/v1/systemone/separate", http::verb::post},
                             {"/health", http::verb::get},
                             {"/health/live", http::verb::get},
                             {"/health/ready", http::verb::get},
                             {"/v1/models", http::verb::get},
                             {"/metrics", http::verb::get},
                             {"/openapi.json", http::verb::get}};
// clang-format on

std::vector<std::string> route_names() {
  std::vector<std::string> out;
  for (const Route& r : kRoutes) out.emplace_back(r.path);
  return out;
}

// ISO 8601 UTC with milliseconds, for the JSON request log.
std::string utc_now() {
  const auto now = std::chrono::system_clock::now();
  const std::time_t t = std::chrono::system_clock::to_time_t(now);
  const auto ms =
      std::chrono::duration_cast<std::chrono::milliseconds>(now.time_since_epoch()).count() % 1000;
  std::tm tm{};
  gmtime_r(&t, &tm);
  return fmt::format("{:04}-{:02}-{:02}T{:02}:{:02}:{:02}.{:03}Z", tm.tm_year + 1900, tm.tm_mon + 1,
                     tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec, ms);
}

}  // namespace

class Connection : public std::enable_shared_from_this<Connection> {
 public:
  enum class Phase { kIdle, kReading, kBusy, kWriting, kClosed };

  Connection(std::shared_ptr<HttpServer::Impl> server, tcp::socket socket, bool reject)
      : srv_(std::move(server)),
        stream_(std::move(socket)),
        buffer_(srv_->options.max_header_bytes + 65536),
        reject_(reject),
        route_(srv_->metrics.other()) {}

  void start() {
    if (reject_) {
      // Over the connection limit and nothing idle to close: say so instead of leaving the
      // client in the backlog.
      return send(detail(503, "too many connections; retry later", true));
    }
    wait_request();
  }

  Phase phase() const { return phase_; }
  // Waiting for a next request with nothing of it received: no bytes in our buffer or in the
  // kernel's, so closing it cannot drop a request the client has already sent.
  bool idle() {
    beast::error_code ec;
    return phase_ == Phase::kIdle && buffer_.size() == 0 && stream_.socket().available(ec) == 0 &&
           !ec;
  }
  // Idle after serving at least one request: a keep-alive connection whose client can reconnect
  // at no cost (a brand-new connection is not idle in this sense; newcomers must not evict each
  // other at the connection cap).
  // Only after kEvictIdleAfter: a client usually sends its next request within milliseconds of
  // an answer, and a connection closed just as that request is on its way fails it with no
  // answer (the client cannot tell it was not processed).
  bool idle_between_requests() {
    return served_ > 0 && Clock::now() - idle_since_ >= kEvictIdleAfter && idle();
  }
  bool reading() const { return phase_ == Phase::kReading; }
  Clock::time_point started() const { return start_; }
  void evict() {
    if (reading()) log(408);
    close();
  }

 private:
  const ServeOptions& opt() const { return srv_->options; }

  // Keep-alive: wait (idle_timeout) for the first byte of the next request, unless a pipelined
  // one is already buffered.
  void wait_request() {
    phase_ = Phase::kIdle;
    idle_since_ = Clock::now();
    if (buffer_.size() > 0) return begin_request();
    if (!srv_->accepting) {  // draining: only a request the client has already sent is read
      beast::error_code ec;
      if (stream_.socket().available(ec) == 0 || ec) return close();
    }
    stream_.expires_after(seconds(opt().idle_timeout_s));
    stream_.async_read_some(buffer_.prepare(4096),
                            [self = shared_from_this()](beast::error_code ec, size_t n) {
                              // Closed meanwhile (shutdown or the cap): a completion already
                              // queued must not start a request on a closed connection.
                              if (self->phase_ == Phase::kClosed) return;
                              self->buffer_.commit(n);
                              if (ec || n == 0) return self->close();
                              self->begin_request();
                            });
  }

  void begin_request() {
    phase_ = Phase::kReading;
    start_ = Clock::now();
    method_.clear();  // (not = "-": GCC 12 raises a false -Wrestrict on that)
    path_.clear();
    request_id_.clear();
    route_ = srv_->metrics.other();
    scored_.reset();
    queue_ms_ = -1;
    origin_.reset();
    cookie_ = false;
    head_ = false;
    logged_ = false;
    counted_ = false;
    // One deadline for the whole request, headers and body: a client trickling bytes cannot
    // extend it (Beast's timer is absolute across the reads below).
    stream_.expires_after(seconds(opt().request_timeout_s));
    parser_.emplace();
    parser_->header_limit(static_cast<std::uint32_t>(opt().max_header_bytes));
    // No body limit while the header is read: a declared Content-Length over max_body is
    // refused by check_header() once every field is in, so that the 413 still carries the
    // client's request id; the limit proper is set before any body byte is read.
    parser_->body_limit(std::numeric_limits<std::uint64_t>::max());
    read_header();
  }

  // Feeds Beast's parser until the header is complete. Beast parses; this loop (what
  // http::async_read_header does) exists so that the header's raw bytes can be seen once Beast
  // has delimited them: Beast silently unfolds obs-fold continuation lines, which RFC 9112 5.2
  // lets a server refuse, and which a front proxy may read differently (a folded
  // Transfer-Encoding is a classic smuggling vector). Beast consumes nothing of a header until
  // all of it is in the buffer, so the bytes it consumes at once are exactly the header.
  void read_header() {
    if (buffer_.size() > 0) {
      beast::error_code ec;
      const size_t n = parser_->put(buffer_.data(), ec);
      if (!ec && parser_->is_header_done()) {
        const bool folded =
            has_obs_fold(std::string_view(static_cast<const char*>(buffer_.data().data()), n));
        buffer_.consume(n);
        if (folded)
          return send(detail(400,
                             "obsolete line folding (a header line starting with a space "
                             "or tab) is not accepted",
                             true));
        return on_header({});
      }
      buffer_.consume(n);
      if (ec && ec != http::error::need_more) return on_read_error(ec);
    }
    if (buffer_.size() >= buffer_.max_size()) return on_read_error(http::error::buffer_overflow);
    const size_t room = std::min<size_t>(65536, buffer_.max_size() - buffer_.size());
    stream_.async_read_some(buffer_.prepare(room),
                            [self = shared_from_this()](beast::error_code ec, size_t n) {
                              if (self->phase_ == Phase::kClosed) return;
                              self->buffer_.commit(n);
                              if (ec == asio::error::eof && self->buffer_.size() > 0)
                                ec = http::error::partial_message;
                              if (ec) return self->on_read_error(ec);
                              self->read_header();
                            });
  }

  // A line of a complete header section that starts with a space or tab (after the request
  // line: Beast itself refuses one right after it).
  static bool has_obs_fold(std::string_view header) {
    for (size_t i = header.find("\r\n"); i != std::string_view::npos && i + 2 < header.size();
         i = header.find("\r\n", i + 2))
      if (header[i + 2] == ' ' || header[i + 2] == '\t') return true;
    return false;
  }

  void on_read_error(beast::error_code ec) {
    if ((ec == http::error::header_limit || ec == beast::http::error::buffer_overflow) && parser_ &&
        parser_->is_header_done())
      return send(
          detail(400, "a chunk-size line (with its extensions) or the trailer is too long", true));
    if (ec == http::error::header_limit || ec == beast::http::error::buffer_overflow)
      return send(detail(
          431,
          fmt::format("the request header section is larger than {} bytes", opt().max_header_bytes),
          true));
    if (ec == http::error::body_limit)
      return send(detail(
          413, fmt::format("the request body is larger than {} bytes", opt().max_body), true));
    const bool framing = ec.category() == http::make_error_code(http::error::bad_target).category();
    if (framing && ec != http::error::end_of_stream && ec != http::error::partial_message &&
        ec != http::error::need_more && ec != http::error::need_buffer)
      return send(detail(400, fmt::format("malformed HTTP request: {}", ec.message()), true));
    // Timeout (the socket is already closed), reset, or the client closed mid-request.
    if (ec == beast::error::timeout) log(408);
    close();
  }

  void on_header(beast::error_code ec) {
    if (ec) return on_read_error(ec);
    const Request& req = parser_->get();
    method_ =
        printable(std::string_view(req.method_string().data(), req.method_string().size()), 32);
    const std::string_view target(req.target().data(), req.target().size());
    path_ = printable(target);
    route_ = srv_->metrics.route(target_path(target).value_or(std::string_view()));
    head_ = req.method() == http::verb::head;
    // x-typesafe-request-id: the client's, echoed when sane, else a fresh one (request_id.h).
    auto id = req.find(kRequestIdHeader);
    request_id_ =
        request_id(id == req.end() ? std::string_view()
                                   : std::string_view(id->value().data(), id->value().size()));
    if (auto o = req.find(http::field::origin); o != req.end())
      origin_ = std::string(o->value().data(), o->value().size());
    cookie_ = req.find(http::field::cookie) != req.end();
    if (auto r = check_header(req)) return send(std::move(*r));
    // Every body in memory at once stays under max_body_total: a chunked body reserves the
    // whole per-request limit, since its size is unknown until it ends.
    const size_t want = parser_->content_length() ? static_cast<size_t>(*parser_->content_length())
                        : parser_->chunked()      ? opt().max_body
                                                  : 0;
    if (srv_->body_bytes + want > opt().max_body_total)
      return send(detail(503, "too many request bodies in memory; retry later", true));
    reserved_ = want;
    srv_->body_bytes += want;
    parser_->body_limit(opt().max_body);
    if (parser_->is_done()) return handle();
    // RFC 9110 10.1.1: an HTTP/1.0 request's 100-continue expectation is ignored (a 1.0 client
    // does not know the interim response).
    if (auto e = req.find(http::field::expect); e != req.end() && req.version() == 11) {
      // RFC 9110 10.1.1: the client waits for this before sending the body (curl does, over 1 MiB).
      auto cont = std::make_shared<http::response<http::empty_body>>(http::status::continue_,
                                                                     req.version());
      return http::async_write(stream_, *cont,
                               [self = shared_from_this(), cont](beast::error_code ec, size_t) {
                                 if (ec) return self->close();
                                 if (self->phase_ != Phase::kClosed) self->read_body();
                               });
    }
    read_body();
  }

  void read_body() {
    http::async_read(stream_, buffer_, *parser_,
                     [self = shared_from_this()](beast::error_code ec, size_t) {
                       if (self->phase_ == Phase::kClosed) return;
                       if (ec) return self->on_read_error(ec);
                       self->handle();
                     });
  }

  // What RFC 9112 leaves to the recipient and Beast lets through: refused before any body byte
  // is read, and the connection is closed since its framing is in doubt.
  std::optional<Reply> check_header(const Request& req) {
    if (req.version() != 11 && req.version() != 10)
      return detail(505, "only HTTP/1.0 and HTTP/1.1 are served", true);
    size_t fields = 0, hosts = 0, lengths = 0, codings = 0;
    for (const auto& f : req) {
      ++fields;
      if (f.name() == http::field::host) ++hosts;
      if (f.name() == http::field::content_length) ++lengths;
      if (f.name() == http::field::transfer_encoding) ++codings;
    }
    if (fields > opt().max_headers)
      return detail(
          431, fmt::format("the request has more than {} header fields", opt().max_headers), true);
    if (req.version() == 11 && hosts != 1)
      return detail(400, "an HTTP/1.1 request needs exactly one Host header", true);
    if (lengths > 1) return detail(400, "more than one Content-Length header", true);
    if (lengths == 1) {
      // Beast takes "73, 73" (a list of equal values, which RFC 9110 8.6 lets a recipient
      // collapse) as 73; a proxy in front may not, so only plain digits are accepted.
      auto cl = req[http::field::content_length];
      const std::string_view v = trim(std::string_view(cl.data(), cl.size()));
      if (v.empty() || v.find_first_not_of("0123456789") != std::string_view::npos)
        return detail(400, "Content-Length must be one decimal number", true);
    }
    if (codings > 0) {
      // Beast frames the body by chunked only when it is the last coding, and reads any other
      // value as "no body": a smuggling vector behind proxies that disagree. Only plain
      // "chunked" (HTTP/1.1) is accepted.
      auto te = req[http::field::transfer_encoding];
      if (codings > 1 || req.version() != 11 ||
          !iequals(trim(std::string_view(te.data(), te.size())), "chunked"))
        return detail(400, "Transfer-Encoding other than a single \"chunked\" is not accepted",
                      true);
    }
    if (auto ce = req.find(http::field::content_encoding); ce != req.end()) {
      // A compressed body's size says nothing of its decoded size: refused, not inflated.
      return detail(415, "Content-Encoding is not accepted; send the body uncompressed", true);
    }
    if (auto e = req.find(http::field::expect);
        e != req.end() &&
        !iequals(trim(std::string_view(e->value().data(), e->value().size())), "100-continue"))
      return detail(417, "only \"Expect: 100-continue\" is understood", true);
    if (auto len = parser_->content_length(); len && *len > opt().max_body)
      return detail(413, fmt::format("the request body is larger than {} bytes", opt().max_body),
                    true);
    if (!target_path(std::string_view(req.target().data(), req.target().size())))
      return detail(400, "the request target must be a path starting with / or an http URI", true);
    return std::nullopt;
  }

  // Starlette's CORS preflight (allow_origins/methods/headers "*"): an OPTIONS with Origin and
  // Access-Control-Request-Method, on any path, answered before routing.
  Reply preflight(const Request& req) const {
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

  void handle() {
    const Request& req = parser_->get();
    // check_header() refused every target without a path.
    const std::string_view path =
        *target_path(std::string_view(req.target().data(), req.target().size()));
    if (req.method() == http::verb::options && origin_ &&
        req.find(http::field::access_control_request_method) != req.end())
      return send(preflight(req));
    // Upstream: every path under /v1 (known or not) needs the key when one is set.
    if (!opt().api_key.empty() && path.substr(0, 3) == "/v1" && !srv_->authorized(req)) {
      Reply r = detail(401, "missing or invalid API key; send Authorization: Bearer <KEV_API_KEY>");
      r.headers.emplace_back("www-authenticate", "Bearer");
      return send(std::move(r));
    }
    const Route* route = nullptr;
    for (const Route& r : kRoutes)
      if (path == r.path) route = &r;
    if (!route) return send(detail(404, fmt::format("no such path: {}", printable(path))));
    // HEAD is GET without the body (RFC 9110 9.3.2; Starlette adds it to every GET route).
    const bool get = route->method == http::verb::get;
    if (req.method() != route->method && !(get && head_)) {
      const char* allowed = get ? "GET" : "POST";
      Reply r =
          detail(405, fmt::format("{} does not accept {}; use {}", route->path, method_, allowed));
      r.allow = get ? "GET, HEAD" : "POST";
      return send(std::move(r));
    }
    const std::string_view p = route->path;
    if (p == "/health/live") return send(json_reply(200, {{"status", "live"}}));
    if (p == "/health/ready") return send(srv_->ready_reply());
    if (p == "/health") return send(json_reply(200, srv_->health()));
    if (p == "/metrics") return send(srv_->metrics_reply());
    if (p == "/openapi.json") {
      Reply r;
      r.body = srv_->openapi;
      return send(std::move(r));
    }
    if (!srv_->scorer.load()) return send(detail(503, "the model is still loading; retry later"));
    if (p == "/v1/models") return send(json_reply(200, srv_->models()));

    // POST /v1/systemone[/permute|/separate]: into the FIFO queue; the worker posts the reply
    // back to this thread.
    const Endpoint endpoint = p == "/v1/systemone/permute"    ? Endpoint::kPermute
                              : p == "/v1/systemone/separate" ? Endpoint::kSeparate
                                                              : Endpoint::kSystemOne;
    phase_ = Phase::kBusy;
    stream_.expires_never();
    auto self = shared_from_this();
    auto body = std::make_shared<const std::string>(std::move(parser_->get().body()));
    const int fd = stream_.socket().native_handle();
    auto& io = srv_->io;
    const double wait_s = opt().queue_timeout_s;
    auto task = std::make_shared<ScoreTask>();
    task->body = body;
    task->fd = fd;
    task->endpoint = endpoint;
    task->queued_at = Clock::now();
    task->reply = [self, &io](Reply r) -> std::function<void()> {
      auto reply = std::make_shared<Reply>(std::move(r));
      return [self, reply, &io] {
        asio::post(io, [self, reply] {
          self->queue_ms_ = reply->queue_ms;
          if (reply->cancelled) return self->cancelled();
          self->send(std::move(*reply));
        });
      };
    };
    const Clock::time_point queued_at = task->queued_at;
    bool queued = srv_->admission.submit(std::move(task), [self, &io, wait_s, queued_at] {
      const double waited = std::chrono::duration<double>(Clock::now() - queued_at).count();
      self->srv_->metrics.queue_wait(waited);
      asio::post(io, [self, wait_s, waited] {
        self->queue_ms_ = waited * 1000;
        self->send(detail(
            503, fmt::format("no scoring slot became free within {} s; retry later", wait_s)));
      });
    });
    if (!queued) {
      auto [inflight, waiting] = srv_->admission.counts();
      send(detail(503, fmt::format("the server is busy ({} scoring, {} queued); retry later",
                                   inflight, waiting)));
    }
  }

  void cancelled() {
    log(499);  // nginx's "client closed request": stopped at a safe point, nothing sent
    close();
  }

  void release() {
    srv_->body_bytes -= reserved_;
    reserved_ = 0;
  }

  void send(Reply r) {
    if (phase_ == Phase::kClosed) return;  // a worker's reply for a connection closed meanwhile
    release();
    phase_ = Phase::kWriting;
    ++served_;
    status_ = r.status;
    scored_ = r.scored;
    count(r.status);
    const unsigned version =
        parser_ && parser_->is_header_done() && parser_->get().version() == 10 ? 10 : 11;
    auto res = std::make_shared<http::response<http::string_body>>(
        static_cast<http::status>(r.status), version);
    res->set(http::field::content_type, r.content_type);
    if (r.retry_after) res->set(http::field::retry_after, "1");
    if (!r.allow.empty()) res->set(http::field::allow, r.allow);
    for (const auto& [name, value] : r.headers) res->set(name, value);
    // Upstream's CORSMiddleware on a request with an Origin: any origin, the two headers below
    // readable by scripts; a request with cookies gets its origin echoed (Vary: Origin).
    if (origin_ && !r.preflight) {
      const bool echo = cookie_ && !origin_->empty() && printable_ascii(*origin_);
      res->set(http::field::access_control_allow_origin, echo ? *origin_ : std::string("*"));
      res->set(http::field::access_control_expose_headers, "x-typesafe-request-id, server-timing");
      if (echo) res->set(http::field::vary, "Origin");
    }
    // Upstream's typesafe middleware, on every response.
    if (request_id_.empty()) request_id_ = new_request_id();  // kept for this request's log
    res->set(kRequestIdHeader, request_id_);
    res->set("server-timing",
             fmt::format("app;dur={:.1f}",
                         std::chrono::duration<double, std::milli>(Clock::now() - start_).count()));
    res->body() = std::move(r.body);
    // After shutdown(): answer what is already buffered (pipelined), then close.
    // Near the connection cap (over 7/8 of it) a reply closes its connection: left idle there, it
    // would be evicted by a newcomer, possibly as its client sends the next request (which then
    // fails with no answer); a close announced in the reply is not racy.
    const bool crowded = srv_->connections.size() * 8 > opt().max_connections * 7;
    // What the client has already sent (pipelined) is answered in any case.
    beast::error_code ec;
    const bool more = buffer_.size() > 0 || (stream_.socket().available(ec) > 0 && !ec);
    const bool keep = !r.close && parser_ && parser_->is_done() && parser_->get().keep_alive() &&
                      ((srv_->accepting && !crowded) || more);
    res->keep_alive(keep);
    res->prepare_payload();
    // A reply to HEAD has the fields of the reply to GET and no body (RFC 9110 9.3.2): a body
    // here would be read as the start of the next response by the client or a proxy.
    if (head_) res->body().clear();
    // The request (and any body an unscored request carried) is no longer needed: free it now,
    // since release() has already returned its bytes to --max-body-total.
    parser_.reset();
    stream_.expires_after(seconds(opt().request_timeout_s));
    http::async_write(
        stream_, *res,
        [self = shared_from_this(), res, keep, linger = r.close](beast::error_code ec, size_t) {
          self->log(self->status_);
          if (ec) return self->close();
          if (!keep) return linger ? self->linger() : self->close();
          self->wait_request();
        });
  }

  // After an error reply the client may still be sending; closing now would reset the
  // connection and could destroy the reply before it is read. Half-close and discard a bounded
  // amount for a bounded time first.
  void linger() {
    beast::error_code ignored;
    stream_.socket().shutdown(tcp::socket::shutdown_send, ignored);
    stream_.expires_after(kLingerTime);
    buffer_.clear();
    stream_.async_read_some(buffer_.prepare(4096),
                            [self = shared_from_this()](beast::error_code ec, size_t n) {
                              self->discarded_ += n;
                              if (ec || n == 0 || self->discarded_ > kLingerBytes)
                                return self->close();
                              self->linger();
                            });
  }

  // Metrics: once per request, when its reply is ready (or it is given up: 408, 499).
  void count(int status) {
    if (counted_) return;
    counted_ = true;
    srv_->metrics.request(route_, status,
                          std::chrono::duration<double>(Clock::now() - start_).count());
  }

  // After the reply is written (or the request is given up): one line on stderr.
  void log(int status) {
    count(status);
    if (!opt().log_requests || logged_) return;
    logged_ = true;
    const double ms = std::chrono::duration<double, std::milli>(Clock::now() - start_).count();
    if (opt().log_format == LogFormat::kText) {
      srv_->log.line(fmt::format("kev serve: {} {} {} {:.1f} ms", method_.empty() ? "-" : method_,
                                 path_.empty() ? "-" : path_, status, ms));
      return;
    }
    if (request_id_.empty()) request_id_ = new_request_id();  // the request line was never read
    auto or_null = [](bool known, auto value) {
      return known ? OrderedJson(value) : OrderedJson();
    };
    const bool scored = scored_.has_value();
    const ScoreUsage u = scored ? scored_->usage : ScoreUsage{};
    OrderedJson line = {{"ts", utc_now()},
                        {"request_id", request_id_},
                        {"method", method_.empty() ? OrderedJson() : OrderedJson(method_)},
                        {"path", path_.empty() ? OrderedJson() : OrderedJson(path_)},
                        {"route", srv_->metrics.route_name(route_)},
                        {"status", status},
                        {"duration_ms", python_round(ms, 3)},
                        {"queue_ms", or_null(queue_ms_ >= 0, python_round(queue_ms_, 3))},
                        {"input_tokens", or_null(scored, u.input_tokens)},
                        {"state_tokens", or_null(scored, u.state_tokens)},
                        {"row_tokens", or_null(scored, u.input_tokens - u.state_tokens)},
                        {"cached", or_null(scored, u.cached_tokens > 0)},
                        {"truncated", or_null(scored, u.truncated)},
                        {"questions", or_null(scored, scored ? scored_->questions : 0)},
                        {"batch", or_null(scored, scored ? scored_->batch : 0)}};
    // Every string above is printable ASCII already; replace guards the line regardless.
    const std::string text = line.dump(-1, ' ', false, OrderedJson::error_handler_t::replace);
    srv_->log.line(text);
  }

 public:
  void close() {
    if (phase_ == Phase::kClosed) return;
    phase_ = Phase::kClosed;
    release();
    beast::error_code ignored;
    stream_.socket().shutdown(tcp::socket::shutdown_both, ignored);
    stream_.close();
    srv_->connection_closed(this);
  }

  bool rejecting() const { return reject_; }

 private:
  std::shared_ptr<HttpServer::Impl> srv_;
  beast::tcp_stream stream_;
  beast::flat_buffer buffer_;
  std::optional<http::request_parser<http::string_body>> parser_;
  bool reject_;
  Phase phase_ = Phase::kIdle;
  Clock::time_point start_ = Clock::now();
  std::string method_, path_;  // printable; empty until the request line is parsed
  std::string request_id_;     // the client's x-typesafe-request-id when sane, else generated
  size_t route_;               // metrics label index (other() until a request line is read)
  std::optional<Scored> scored_;
  double queue_ms_ = -1;               // time in the scoring queue; < 0: never queued
  std::optional<std::string> origin_;  // the request's Origin header
  bool cookie_ = false;                // the request carries a Cookie header
  bool head_ = false;                  // the request is a HEAD: its reply carries no body
  int status_ = 0;
  bool logged_ = false, counted_ = false;
  size_t discarded_ = 0;
  size_t reserved_ = 0;                          // of srv_->body_bytes
  size_t served_ = 0;                            // replies sent on this connection
  Clock::time_point idle_since_ = Clock::now();  // when it last became idle
};

void HttpServer::Impl::connection_closed(Connection* c) {
  if (c->rejecting()) {
    --rejecting;
  } else {
    connections.erase(c);
  }
  reopen_spare();  // a descriptor was just freed
  maybe_finish();
}

void HttpServer::Impl::accept() {
  acceptor.async_accept(io, [self = shared_from_this()](beast::error_code ec, tcp::socket socket) {
    if (!self->accepting) return;
    if (ec) return self->accept_failed(ec);
    self->admit(std::move(socket), false);
    self->accept();
  });
}

void HttpServer::Impl::accept_failed(beast::error_code ec) {
  const bool no_fds =
      ec == asio::error::no_descriptors || ec == boost::system::errc::too_many_files_open_in_system;
  // One line a second at most: a client flood against an exhausted descriptor table must not
  // turn into a flood of log lines.
  ++accept_failures;
  if (Clock::now() - accept_logged >= std::chrono::seconds(1)) {
    accept_logged = Clock::now();
    log.line(fmt::format("kev serve: accept failed ({} times): {}; {} connections open",
                         accept_failures, ec.message(), connections.size()));
    accept_failures = 0;
  }
  // Out of descriptors, the client would wait unanswered in the backlog until one is freed (by
  // an idle or request deadline: seconds). The spare descriptor held for this moment is given
  // up to take it: room is made as at the connection cap, else it is answered 503.
  if (no_fds && spare_fd >= 0) {
    ::close(spare_fd);
    spare_fd = -1;
    tcp::socket socket(io);
    beast::error_code aec;
    acceptor.accept(socket, aec);  // non-blocking: would_block if the client has gone
    if (!aec) {
      admit(std::move(socket), true);
      return accept();
    }
    reopen_spare();
  }
  // Retry shortly rather than spin.
  accept_retry.expires_after(std::chrono::milliseconds(100));
  accept_retry.async_wait([self = shared_from_this()](beast::error_code) {
    if (self->accepting) self->accept();
  });
}

void HttpServer::Impl::refuse_now(tcp::socket& socket) {
  beast::error_code ignored;
  socket.non_blocking(true, ignored);
  // What the client already sent is read and dropped, so that closing does not reset the
  // connection (a reset can discard the reply before the client reads it).
  std::array<char, 4096> sink;
  for (int i = 0; i < 16 && socket.read_some(asio::buffer(sink), ignored) > 0;) ++i;
  const std::string body = R"({"detail":"too many connections; retry later"})";
  const std::string reply = fmt::format(
      "HTTP/1.1 503 Service Unavailable\r\nContent-Type: application/json\r\nRetry-After: "
      "1\r\n{}: {}\r\nserver-timing: app;dur=0.0\r\nConnection: close\r\nContent-Length: "
      "{}\r\n\r\n{}",
      kRequestIdHeader, new_request_id(), body.size(), body);
  socket.write_some(asio::buffer(reply), ignored);  // a few hundred bytes: fits any send buffer
  metrics.request(metrics.other(), 503, 0);
  socket.shutdown(tcp::socket::shutdown_send, ignored);
  socket.close(ignored);
}

void HttpServer::Impl::reopen_spare() {
  if (spare_fd < 0) spare_fd = ::open("/dev/null", O_RDONLY | O_CLOEXEC);
}

void HttpServer::Impl::admit(tcp::socket socket, bool out_of_fds) {
  beast::error_code ignored;
  socket.set_option(tcp::no_delay(true), ignored);
  socket.set_option(asio::socket_base::send_buffer_size(kSendBufferBytes), ignored);
  bool reject = false;
  if (connections.size() >= options.max_connections || out_of_fds) {
    // Make room by closing an idle keep-alive connection (its client reconnects at no
    // cost), else the one that has been sending its request the longest: at the cap that is
    // a slow-header/slow-body client, while a normal request is read in milliseconds. When
    // there is neither, the new connection is refused (503).
    Connection* victim = nullptr;
    for (Connection* c : connections)
      if (c->idle_between_requests()) {
        victim = c;
        break;
      }
    // A reader is only a victim after a grace time, so a normal request caught mid-read
    // at the cap is not cut off by a newcomer.
    const auto grace =
        Clock::now() - std::min(seconds(1.0), seconds(options.request_timeout_s / 2));
    if (!victim)
      for (Connection* c : connections)
        if (c->reading() && c->started() < grace && (!victim || c->started() < victim->started()))
          victim = c;
    if (victim) {
      victim->evict();
    } else {
      reject = true;
    }
  }
  // Beyond the connections answered 503 at their own pace, or holding the spare descriptor:
  // answered at once instead, so that the descriptor is free again before the next accept.
  if (reject && (out_of_fds || rejecting >= extra_rejecting)) {
    refuse_now(socket);
    reopen_spare();
    return;
  }
  auto c = std::make_shared<Connection>(shared_from_this(), std::move(socket), reject);
  if (reject) {
    ++rejecting;
  } else {
    connections.insert(c.get());
  }
  c->start();
}

void HttpServer::Impl::on_shutdown() {
  if (!accepting) return;
  accepting = false;
  beast::error_code ignored;
  acceptor.close(ignored);
  accept_retry.cancel();
  std::vector<Connection*> idle;
  for (Connection* c : connections)
    if (c->idle()) idle.push_back(c);
  for (Connection* c : idle) c->close();
  maybe_finish();
}

HttpServer::HttpServer(ServeOptions options) : impl_(std::make_shared<Impl>(std::move(options))) {
  const ServeOptions& o = impl_->options;
  if (o.max_inflight == 0 || o.max_inflight > 1024)
    fail(ErrorKind::kBadInput, "--max-inflight must be between 1 and 1024");
  if (o.max_batch == 0 || o.max_batch > 1024)
    fail(ErrorKind::kBadInput, "--max-batch must be between 1 and 1024");
  if (o.max_connections == 0 || o.max_connections > 1000000)
    fail(ErrorKind::kBadInput, "--max-connections must be between 1 and 1000000");
  if (o.max_queue > 1000000) fail(ErrorKind::kBadInput, "--max-queue must be at most 1000000");
  if (o.max_body_total < o.max_body)
    fail(ErrorKind::kBadInput, "--max-body-total ({}) must be at least --max-body ({})",
         o.max_body_total, o.max_body);
  if (o.max_header_bytes < 256 || o.max_header_bytes > (size_t{1} << 30))
    fail(ErrorKind::kBadInput, "--max-header-bytes must be between 256 and 2^30");
  for (double t : {o.queue_timeout_s, o.request_timeout_s, o.idle_timeout_s})
    if (!(t > 0 && t <= 86400))
      fail(ErrorKind::kBadInput, "timeouts must be between 0 and 86400 seconds, not {}", t);
}

HttpServer::~HttpServer() {
  try {
    shutdown();
    wait();
  } catch (...) {  // a destructor does not throw; wait() only joins threads
  }
  impl_->log.stop();  // what is queued, for at most a second if stderr is not read
}

int HttpServer::bind() {
  const ServeOptions& o = impl_->options;
  if (o.port < 0 || o.port > 65535)
    fail(ErrorKind::kBadInput, "--port {} is not a TCP port (0..65535)", o.port);
  // Each connection is a file descriptor; raise the soft limit as far as allowed.
  rlimit rl{};
  if (getrlimit(RLIMIT_NOFILE, &rl) == 0) {
    // Connections, those answered 503 beyond the cap, and the process's own few (standard
    // streams, the event loop's, the listener, the spare: 8 measured, 16 allowed).
    const rlim_t need = o.max_connections + impl_->extra_rejecting + 16;
    if (rl.rlim_cur < need) {
      rl.rlim_cur = std::min<rlim_t>(need, rl.rlim_max);
      setrlimit(RLIMIT_NOFILE, &rl);
    }
    if (rl.rlim_cur < need)
      fail(ErrorKind::kBadInput,
           "--max-connections {} needs {} file descriptors but the limit is {}: raise ulimit -n "
           "or lower --max-connections",
           o.max_connections, need, rl.rlim_cur);
  }
  beast::error_code ec;
  auto address = asio::ip::make_address(o.host, ec);
  if (ec) fail(ErrorKind::kIo, "cannot listen on {}:{} (not an IP address)", o.host, o.port);
  tcp::endpoint endpoint(address, static_cast<unsigned short>(o.port));
  tcp::acceptor& a = impl_->acceptor;
  a.open(endpoint.protocol(), ec);
  // SO_REUSEADDR for quick restarts; never SO_REUSEPORT, which would let a second server bind
  // the same port silently and split the traffic.
  if (!ec) a.set_option(asio::socket_base::reuse_address(true), ec);
  if (!ec) a.bind(endpoint, ec);
  // A deep backlog: bursts of new connections wait in the kernel queue, not on SYN retries.
  if (!ec) a.listen(asio::socket_base::max_listen_connections, ec);
  if (ec) fail(ErrorKind::kIo, "cannot listen on {}:{} ({})", o.host, o.port, ec.message());
  return a.local_endpoint().port();
}

void HttpServer::start() {
  Impl& s = *impl_;
  if (s.started) return;
  s.started = true;
  s.started_at = Clock::now();
  s.guard.emplace(s.io.get_executor());
  s.admission.start([&s](const std::vector<std::shared_ptr<ScoreTask>>& tasks) {
    // Made before scoring, so that the out-of-memory fallback allocates nothing new per task.
    const Reply out_of_memory = detail(503, "out of memory while scoring; retry later");
    std::vector<std::function<void()>> then;
    then.reserve(tasks.size());
    std::vector<Reply> replies;
    try {
      replies = s.score_batch(tasks);
    } catch (...) {  // only the batch's own bookkeeping can throw here (out of memory)
      replies.assign(tasks.size(), out_of_memory);
    }
    for (size_t i = 0; i < tasks.size(); ++i)
      then.push_back(tasks[i]->reply(std::move(replies[i])));
    return then;
  });
  s.reopen_spare();
  beast::error_code ignored;
  s.acceptor.non_blocking(true, ignored);  // for accept_failed()'s one synchronous accept
  s.accept();
  s.io_thread = std::thread([&s] {
    // A handler that throws (e.g. bad_alloc) costs its connection, not the process: log it and
    // keep running the loop (Asio allows run() again after an exception).
    for (;;) {
      try {
        s.io.run();
        return;
      } catch (const std::exception& e) {
        s.log.line(fmt::format("kev serve: internal error in the I/O loop: {}", e.what()));
      }
    }
  });
}

void HttpServer::set_ready(const Scorer& scorer, BundleInfo bundle) {
  impl_->metrics.model_loaded(
      std::chrono::duration<double>(Clock::now() - impl_->started_at).count());
  impl_->bundle = std::move(bundle);
  impl_->scorer.store(&scorer);
  Lifecycle expected = Lifecycle::kLoading;
  impl_->lifecycle.compare_exchange_strong(expected, Lifecycle::kReady);
}

void HttpServer::drain() {
  impl_->lifecycle.store(Lifecycle::kDraining);
}

void HttpServer::log_line(std::string line) {
  impl_->log.line(std::move(line));
}

void HttpServer::shutdown() {
  drain();
  if (!impl_->started) return;
  asio::post(impl_->io, [s = impl_] { s->on_shutdown(); });
}

void HttpServer::wait() {
  Impl& s = *impl_;
  if (!s.started || s.waited) return;
  s.waited = true;
  s.io_thread.join();
  s.admission.stop();  // every job was answered: connections wait for theirs before closing
}

namespace {

std::string model_of(const OrderedJson& manifest, const std::string& path) {
  auto it = manifest.find("model");
  if (!manifest.is_object() || it == manifest.end() || !it->is_string() ||
      it->get<std::string>().empty())
    fail(ErrorKind::kBadInput, "{}: \"model\" is missing or not a non-empty string", path);
  return it->get<std::string>();
}

}  // namespace

BundleInfo read_bundle_info(const std::string& bundle_dir) {
  const std::string path = bundle_dir + "/" + "kev_export.json";
  OrderedJson m = parse_json_strict(read_file(path), path);
  BundleInfo info;
  info.model = model_of(m, path);
  auto repo = [&](const char* key) {
    auto it = m.find(key);
    if (it == m.end() || !it->is_object()) return std::string();
    auto r = it->find("repo");
    return r != it->end() && r->is_string() ? r->get<std::string>() : std::string();
  };
  info.base = repo("base");
  info.run = repo("checkpoint");
  if (info.run.empty()) info.run = info.model;
  if (auto l = m.find("lora"); l != m.end() && l->is_object())
    if (auto r = l->find("rank"); r != l->end() && r->is_number_integer())
      info.lora_rank = r->get<int64_t>();
  if (auto t = m.find("temperature"); t != m.end() && t->is_number())
    info.temperature = t->get<double>();
  info.release_date = utc_date(bundle_dir + "/head.safetensors");
  return info;
}

std::string bundle_model_name(const std::string& bundle_dir) {
  const std::string path = bundle_dir + "/" + "kev_export.json";
  return model_of(parse_json_strict(read_file(path), path), path);
}

}  // namespace kev
