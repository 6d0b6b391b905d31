// ScoringService (scoring_service.h): bodies to replies on the admission workers.
#include "serve/scoring_service.h"

#include <fmt/format.h>

#include <algorithm>
#include <new>
#include <optional>

#include "kev/core/error.h"
#include "kev/text/encoding.h"
#include "kev/text/request_decoder.h"

namespace kev {
namespace {

using Clock = std::chrono::steady_clock;

double mib(size_t bytes) {
  return static_cast<double>(bytes) / (1 << 20);
}

// Reserved bytes of a MemoryBudget, given back when the scope ends.
class Reservation {
 public:
  Reservation(MemoryBudget* budget, size_t bytes) : budget_(budget), bytes_(bytes) {}
  ~Reservation() { budget_->release(bytes_); }
  Reservation(const Reservation&) = delete;
  Reservation& operator=(const Reservation&) = delete;

 private:
  MemoryBudget* budget_;
  size_t bytes_;
};

}  // namespace

void ScoringService::publish(const Scorer& s) {
  per_request_ = RequestMemory::of(s.model());
  const size_t bytes = options.memory_budget > 0 ? options.memory_budget
                                                 : default_memory_budget(s.options().cache_bytes);
  budget_ = std::make_unique<MemoryBudget>(bytes);
  scorer.store(&s);
}

std::shared_ptr<const Encoding> ScoringService::encode(const ApiRequest& request) const {
  try {
    return std::make_shared<const Encoding>(scorer.load()->encode(request));
  } catch (const Error&) {
    return nullptr;  // refused by its encoding: the scorer gives the same refusal before any pass
  }
}

size_t ScoringService::need(const Encoding* enc) const {
  if (enc == nullptr) return 0;
  size_t branches = 0, longest = 0;
  for (const EncodedRow& r : enc->rows) {
    branches += r.branch_ids.size();
    longest = std::max(longest, r.branch_ids.size());
  }
  return per_request_.need(enc->state_length, branches, longest);
}

Reply ScoringService::too_large(size_t need) const {
  return detail(413, fmt::format("scoring this request needs {:.1f} MiB ({} bytes: its state's "
                                 "keys and values and the forward's scratch), over the server's "
                                 "memory budget of {:.1f} MiB ({} bytes, --memory-budget); shorten "
                                 "the state or raise the budget",
                                 mib(need), need, mib(budget_->budget()), budget_->budget()));
}

Reply ScoringService::no_memory() const {
  return detail(503, fmt::format("no memory for scoring became free within {} s (memory budget "
                                 "{:.1f} MiB); retry later",
                                 options.queue_timeout_s, mib(budget_->budget())));
}

std::chrono::steady_clock::time_point ScoringService::deadline(const ScoreTask& task) const {
  return task.queued_at + seconds(options.queue_timeout_s);
}

std::vector<Reply> ScoringService::run(const std::vector<std::shared_ptr<ScoreTask>>& tasks) const {
  // Made before scoring, so that the out-of-memory fallback needs no new allocation but copies.
  const Reply out_of_memory = detail(503, "out of memory while scoring; retry later");
  try {
    return score_batch(tasks);
  } catch (...) {  // only the batch's own bookkeeping can throw here (out of memory)
    return std::vector<Reply>(tasks.size(), out_of_memory);
  }
}

// Counts one model pass of `requests` requests scored together (/health, /v1/models, and
// ServeOptions::on_batch for /metrics).
void ScoringService::count_pass(size_t requests) const {
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
std::variant<ApiRequest, Reply> ScoringService::parse(const std::string& body) const {
  try {
    auto decoded = decode_request(body, decode_options());
    if (auto* refused = std::get_if<Refusal>(&decoded))
      return detail(refused->status, refused->detail);
    return std::move(std::get<ApiRequest>(decoded));
  } catch (...) {  // out of memory
    return error_reply(std::current_exception(), {});
  }
}

// On a worker thread: upstream's demo endpoints (permute, separate), each request on its own:
// its single-question passes run one after the other, not batched with other requests.
Reply ScoringService::score_alone(const ScoreTask& task, const std::function<bool()>& gone) const {
  try {
    const Scorer& s = *scorer.load();
    // Decoded, its memory reserved (or refused), then scored.
    auto reserve = [&](const ApiRequest& request, std::optional<Reservation>& held) {
      const size_t bytes = need(encode(request).get());
      if (bytes > budget_->budget()) return std::optional<Reply>(too_large(bytes));
      if (!budget_->acquire(bytes, deadline(task))) return std::optional<Reply>(no_memory());
      held.emplace(budget_.get(), bytes);
      return std::optional<Reply>();
    };
    std::optional<Reservation> held;
    if (task.endpoint == Endpoint::kPermute) {
      auto decoded = decode_permute_request(*task.body, decode_options());
      if (auto* refused = std::get_if<Refusal>(&decoded))
        return detail(refused->status, refused->detail);
      const PermuteRequest& p = std::get<PermuteRequest>(decoded);
      if (auto r = reserve(p.request, held)) return std::move(*r);
      Reply r = json_reply(200, s.permute(p, gone));
      for (int i = 0; i < p.n_perm; ++i) count_pass(1);
      return r;
    }
    auto decoded = decode_request(*task.body, decode_options());
    if (auto* refused = std::get_if<Refusal>(&decoded))
      return detail(refused->status, refused->detail);
    const ApiRequest& request = std::get<ApiRequest>(decoded);
    if (auto r = reserve(request, held)) return std::move(*r);
    Reply r = json_reply(200, s.separate(request, gone));
    for (size_t i = 0; i < request.questions.size(); ++i) count_pass(1);
    return r;
  } catch (...) {
    return error_reply(std::current_exception(), gone);
  }
}

// The gone() of a task: its client reset the connection (flagged by the connection, on the I/O
// thread), or the drain's deadline passed.
std::function<bool()> ScoringService::gone_for(const ScoreTask& task) const {
  return [this, &task] { return stopping.load() || task.client_reset.load(); };
}

Reply ScoringService::shutting_down() {
  return detail(503,
                "the server is shutting down (its drain deadline passed before this request "
                "was answered); retry, on another replica if there is one");
}

// The reply to a request whose parsing or scoring threw `error`.
Reply ScoringService::error_reply(std::exception_ptr error,
                                  const std::function<bool()>& gone) const {
  try {
    std::rethrow_exception(error);
  } catch (const Error& e) {
    if (e.kind() == ErrorKind::kInterrupted && stopping.load()) return shutting_down();
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
std::vector<Reply> ScoringService::score_batch(
    const std::vector<std::shared_ptr<ScoreTask>>& tasks) const {
  std::vector<Reply> replies(tasks.size());
  // Each task's wait in the queue ends here; recorded for /metrics and its log line.
  std::vector<double> waited_ms(tasks.size());
  for (size_t i = 0; i < tasks.size(); ++i) {
    const double waited = std::chrono::duration<double>(Clock::now() - tasks[i]->queued_at).count();
    metrics.queue_wait(waited);
    waited_ms[i] = waited * 1000;
  }
  score_tasks(tasks, replies);
  for (size_t i = 0; i < tasks.size(); ++i) replies[i].queue_ms = waited_ms[i];
  return replies;
}

// score_batch's work: every task's reply in `replies`.
void ScoringService::score_tasks(const std::vector<std::shared_ptr<ScoreTask>>& tasks,
                                 std::vector<Reply>& replies) const {
  std::vector<std::optional<ApiRequest>> requests(tasks.size());
  std::vector<ScoreJob> jobs;
  std::vector<size_t> of;  // jobs[k] is tasks[of[k]]
  for (size_t i = 0; i < tasks.size(); ++i) {
    if (stopping.load()) {  // the drain's deadline passed while it was queued
      replies[i] = shutting_down();
      continue;
    }
    if (tasks[i]->client_reset.load()) {  // reset while queued: nothing is computed for it
      replies[i].cancelled = true;
      continue;
    }
    if (tasks[i]->endpoint != Endpoint::kSystemOne) {
      replies[i] = score_alone(*tasks[i], gone_for(*tasks[i]));
      continue;
    }
    auto parsed = parse(*tasks[i]->body);
    if (Reply* refused = std::get_if<Reply>(&parsed)) {
      replies[i] = std::move(*refused);
      continue;
    }
    requests[i].emplace(std::move(std::get<ApiRequest>(parsed)));
    // Encoded once: the memory it needs is sized from this encoding, and the scorer uses it.
    jobs.push_back(ScoreJob{&*requests[i], gone_for(*tasks[i]), encode(*requests[i])});
    of.push_back(i);
  }
  if (jobs.empty()) return;
  // Memory: a request that alone needs more than the budget is refused; the others are scored
  // in consecutive groups that each fit the budget, each once its bytes are reserved.
  std::vector<size_t> needs;
  std::vector<ScoreJob> fitting;
  std::vector<size_t> fitting_of;
  for (size_t k = 0; k < jobs.size(); ++k) {
    const size_t bytes = need(jobs[k].encoding.get());
    if (bytes > budget_->budget()) {
      replies[of[k]] = too_large(bytes);
      continue;
    }
    needs.push_back(bytes);
    fitting.push_back(jobs[k]);
    fitting_of.push_back(of[k]);
  }
  for (size_t first = 0; first < fitting.size();) {
    size_t last = first + 1, bytes = needs[first];
    while (last < fitting.size() && bytes + needs[last] <= budget_->budget())
      bytes += needs[last++];
    const std::span<const ScoreJob> group(fitting.data() + first, last - first);
    const std::span<const size_t> group_of(fitting_of.data() + first, last - first);
    if (!budget_->acquire(bytes, deadline(*tasks[group_of[0]]))) {
      for (size_t i : group_of) replies[i] = no_memory();
    } else {
      Reservation held(budget_.get(), bytes);
      score_group(group, group_of, replies);
    }
    first = last;
  }
}

// One group of a batch, scored together (one pass of rows), within its reserved memory.
void ScoringService::score_group(std::span<const ScoreJob> jobs, std::span<const size_t> of,
                                 std::vector<Reply>& replies) const {
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

}  // namespace kev
