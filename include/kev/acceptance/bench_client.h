// The client side of `kev bench` (docs/acceptance.md "kev bench"): the request set, the two
// targets a run measures (a bundle's Scorer in process, or a server over HTTP/1.1 keep-alive),
// and one pass of requests spread over workers.
//
// Contract. read_bench_requests: one JSON object per line (text/json_lines.h rules), "id" and
// "labels" taken out of the body; an empty set is Error(kBadInput). A target's send() never
// throws for what the target answers: a scoring error is the server's status with {"detail"}
// (BundleTarget), no HTTP answer is status 0 (HttpTarget); only an interrupt (Ctrl-C) escapes.
// HttpTarget: one connection per worker, reopened once when a kept-alive one was closed; an answer
// body over kMaxBenchAnswerBytes is no answer. run_bench_pass: requests[order[i]] for every i, by
// `concurrency` workers taking the next index in turn; replies in `order`'s order; the first
// exception of any worker stops the others and is rethrown. Thread-safe as stated per function.
#pragma once
#include <cstddef>
#include <cstdint>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "kev/acceptance/bench.h"
#include "kev/score/scorer.h"

namespace kev {

inline constexpr uint64_t kMaxBenchAnswerBytes = uint64_t{64} << 20;

struct BenchRequest {
  std::string id;    // "id" of the line, else its line number
  std::string body;  // the request without "id" / "labels"
};

struct BenchReply {
  BenchOutcome outcome;
  std::string body;
};

std::vector<BenchRequest> read_bench_requests(const std::string& path);

// usage.input_tokens of an answer body, 0 where it has none.
size_t answer_input_tokens(const std::string& body);

class BenchTarget {
 public:
  virtual ~BenchTarget() = default;
  // Thread-safe across workers; `worker` indexes the caller's own connection.
  virtual BenchReply send(size_t worker, const std::string& body) = 0;
  virtual void prepare(size_t workers) = 0;
};

// In process: the bundle's Scorer, as `kev score` uses it (errors as the server's statuses).
class BundleTarget : public BenchTarget {
 public:
  BundleTarget(const std::string& dir, const ScorerOptions& o) : scorer_(dir, o) {}
  void prepare(size_t) override {}
  BenchReply send(size_t, const std::string& body) override;
  const Scorer& scorer() const { return scorer_; }

 private:
  Scorer scorer_;
};

struct BenchUrl {
  std::string host, port, path;  // path "/v1/systemone" when the URL has none
};
// http://HOST[:PORT][/path], PORT 1..65535 (80 by default); https is Error(kUnsupported),
// anything else Error(kBadInput), each naming --url.
BenchUrl parse_bench_url(const std::string& url);

class HttpTarget : public BenchTarget {
 public:
  HttpTarget(BenchUrl url, std::string key, double timeout_s);
  ~HttpTarget() override;
  void prepare(size_t workers) override;
  BenchReply send(size_t worker, const std::string& body) override;
  // A GET on the same server (for the metadata); nullopt unless 200 with a JSON body.
  std::optional<nlohmann::json> get_json(const std::string& path);

 private:
  struct Conn;
  BenchReply exchange(Conn& c, bool post, const std::string& path, const std::string& body);

  BenchUrl url_;
  std::string key_;
  double timeout_;
  std::vector<std::unique_ptr<Conn>> conns_;
};

// `label` and `progress`: a "label: done/total requests" line redrawn on stderr while it runs.
std::vector<BenchReply> run_bench_pass(BenchTarget& target,
                                       const std::vector<BenchRequest>& requests,
                                       const std::vector<size_t>& order, size_t concurrency,
                                       const std::string& label, bool progress, double* wall_s);

// The machine a run was measured on: hostname, kernel, arch, cpu_model, cores, memory_bytes.
nlohmann::json bench_machine();

}  // namespace kev
