// ScoringService (scoring_service.h): bodies to replies on the admission workers.
#include "serve/scoring_service.h"

#include <poll.h>

#include <new>
#include <optional>

#include "kev/core/error.h"
#include "kev/text/request_decoder.h"

namespace kev {
namespace {

using Clock = std::chrono::steady_clock;

// A peer that reset the connection (RST) will never read an answer. A FIN alone is not taken as
// "gone": RFC 9112 allows a client to half-close after sending its request and still read.
bool peer_reset(int fd) {
  pollfd p{fd, POLLIN, 0};
  if (::poll(&p, 1, 0) <= 0) return false;
  return (p.revents & (POLLERR | POLLHUP)) != 0;
}

}  // namespace

std::vector<Reply> ScoringService::run(const std::vector<std::shared_ptr<ScoreTask>>& tasks) const {
  // Made before scoring, so that the out-of-memory fallback allocates nothing new per task.
  const Reply out_of_memory = detail(503, "out of memory while scoring; retry later");
  std::vector<Reply> replies;
  try {
    replies = score_batch(tasks);
  } catch (...) {  // only the batch's own bookkeeping can throw here (out of memory)
    replies.assign(tasks.size(), out_of_memory);
  }
  return replies;
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
Reply ScoringService::score_alone(Endpoint endpoint, const std::string& body,
                                  const std::function<bool()>& gone) const {
  try {
    const Scorer& s = *scorer.load();
    if (endpoint == Endpoint::kPermute) {
      auto decoded = decode_permute_request(body, decode_options());
      if (auto* refused = std::get_if<Refusal>(&decoded))
        return detail(refused->status, refused->detail);
      const PermuteRequest& p = std::get<PermuteRequest>(decoded);
      Reply r = json_reply(200, s.permute(p, gone));
      for (int i = 0; i < p.n_perm; ++i) count_pass(1);
      return r;
    }
    auto decoded = decode_request(body, decode_options());
    if (auto* refused = std::get_if<Refusal>(&decoded))
      return detail(refused->status, refused->detail);
    const ApiRequest& request = std::get<ApiRequest>(decoded);
    Reply r = json_reply(200, s.separate(request, gone));
    for (size_t i = 0; i < request.questions.size(); ++i) count_pass(1);
    return r;
  } catch (...) {
    return error_reply(std::current_exception(), gone);
  }
}

// The reply to a request whose parsing or scoring threw `error`.
Reply ScoringService::error_reply(std::exception_ptr error, const std::function<bool()>& gone) {
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

}  // namespace kev
