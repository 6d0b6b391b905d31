#include "kev/score/scorer.h"

#include <algorithm>
#include <chrono>
#include <iterator>

#include "kev/core/error.h"
#include "kev/core/py_random.h"
#include "kev/core/sha256.h"
#include "kev/text/python_compat.h"

namespace kev {

namespace {

constexpr size_t kTailPointTokens = 8;  // scorer.h
// No point is saved inside a state before this many tokens: a short point (a shared opening
// such as "<state>customer:") would cost a whole GDN state (~19 MiB at 0.8B) to save a handful
// of tokens.
constexpr size_t kMinInnerPointTokens = 64;

// A state's buffers for the cache's byte accounting: its shared and own buffers (model.h), and
// its bookkeeping as one buffer of its own.
std::vector<StateBuffer> cache_buffers(const PrefixState& s) {
  std::vector<StateBuffer> out = state_buffers(s);
  size_t listed = 0;
  for (const StateBuffer& b : out) listed += b.bytes;
  out.push_back({&s, bytes_held(s) - listed});
  return out;
}

}  // namespace

Scorer::Scorer(const std::string& bundle_dir, ScorerOptions options)
    : Scorer(open_bundle(bundle_dir), options) {}

Scorer::Scorer(const Bundle& bundle, ScorerOptions options)
    : options_(options),
      tokenizer_(Tokenizer::from_file(bundle.dir + "/tokenizer.json")),
      delimiters_(delimiters_of(tokenizer_)),
      model_(Model::load(bundle.dir, options.forward, &bundle.manifest)),
      head_(PointerHead::load_bundle(bundle.dir, bundle.manifest)),
      cache_(std::make_unique<PrefixCache<PrefixState>>(
          PrefixCacheLimits{options.cache_entries, options.cache_tokens, options.cache_bytes})) {
  if (options.temperature != 0) head_.set_temperature(options.temperature);
  if (!options.state_dir.empty() && options.cache_entries == 0)
    fail(ErrorKind::kBadInput,
         "--state-dir keeps the prefix cache's saved points on disk: it needs the cache "
         "(--cache-entries > 0)");
  if (!options.state_dir.empty())
    store_ =
        std::make_unique<StateStore>(*model_, sha256_file(bundle.dir + "/" + kManifestFile),
                                     StateStoreOptions{.dir = options.state_dir,
                                                       .max_bytes = options.state_dir_bytes,
                                                       .drain_seconds = options.state_drain_seconds,
                                                       .log = options.state_log});
  const ModelConfig& c = model_->config();
  const std::string& bundle_dir = bundle.dir;
  if (static_cast<int64_t>(head_.hidden()) != c.hidden)
    fail(ErrorKind::kBadInput,
         "{}: head.safetensors expects hidden size {} but config.json says {}", bundle_dir,
         head_.hidden(), c.hidden);
  if (tokenizer_.vocab_size() > c.vocab)
    fail(ErrorKind::kBadInput, "{}: tokenizer.json has {} ids but the model's vocabulary is {}",
         bundle_dir, tokenizer_.vocab_size(), c.vocab);
}

// What a request's state still needs: nothing (done), or its tokens after `from` (null: the
// empty state), in parts that end at the points to save (the last one the state's end).
struct Scorer::StateWork {
  std::shared_ptr<const PrefixState> done;
  std::vector<int32_t> ids;  // the whole state
  std::shared_ptr<const PrefixState> from;
  size_t at = 0;
  PointKind from_kind = PointKind::kEnd;
  bool cached = true;  // false: the state is not cached (upstream's short states, no cache)
  std::vector<std::pair<size_t, PointKind>> points;  // positions in ids, ascending; last: end
  size_t* reused = nullptr;
  // Made ready to run (ready()): the ids after `at`, the points as cuts into them, the state they
  // continue; and, once run, the state at the end.
  std::vector<int32_t> rest;
  std::vector<size_t> cuts;
  PrefixState from_state;
  std::shared_ptr<const PrefixState> end;
};

Scorer::StateWork Scorer::plan_state(const std::vector<int32_t>& ids, size_t* reused) const {
  StateWork w;
  w.ids = ids;
  w.reused = reused;
  const size_t n = ids.size();
  *reused = 0;
  if (options_.cache_entries == 0 || n < options_.cache_min_tokens) {  // not cached (upstream)
    w.cached = false;
    w.points.emplace_back(n, PointKind::kEnd);
    return w;
  }
  // The chunked GDN form gives the one-pass bits only from chunk boundaries (model.h).
  const bool chunked = model_->options().gdn == GdnMode::kChunked;
  const auto chunk = static_cast<size_t>(kGdnChunkTokens);
  const bool exact = options_.exact_only;
  auto usable = [&](size_t len) { return len == n || (!exact && (!chunked || len % chunk == 0)); };
  const std::span<const int32_t> all(ids);
  const auto match = cache_->find_longest(ids, usable);
  auto found = [&](std::shared_ptr<const PrefixState> s) {
    *reused = n;
    reused_tokens_.fetch_add(n, std::memory_order_relaxed);
    w.done = std::move(s);
    return std::move(w);
  };
  if (match.length == n) return found(match.state);
  w.from = match.state;
  w.at = match.length;
  w.from_kind = match.kind;
  if (store_) {  // a longer point on disk (another process's, or one evicted from memory)
    StateStore::Found disk = store_->find_longest(ids, match.length, usable);
    if (disk.state) {
      cache_->insert(all.first(disk.length), disk.state, cache_buffers(*disk.state), disk.kind);
      if (disk.length == n) return found(disk.state);
      w.from = disk.state;
      w.at = disk.length;
      w.from_kind = disk.kind;
    }
  }
  // Points inside this state, past the one continued from and not before kMinInnerPointTokens.
  // A checkpoint at the last multiple of the spacing: a later state that rewrites an older part
  // of this one continues from there. A tail point: appended text often retokenizes the last
  // token or two (". " + "\n" -> ".\n"), and a conversation that rewrites its tail (a summary)
  // each turn leaves each state about as far before its end as this request left the previous
  // one; so kTailPointTokens before that (before the end when it left none).
  std::vector<std::pair<size_t, PointKind>>& points = w.points;
  size_t step = exact ? 0 : options_.checkpoint_tokens;
  if (chunked && step > 0) step = (step + chunk - 1) / chunk * chunk;
  if (step > 0) points.emplace_back((n - 1) / step * step, PointKind::kCheckpoint);
  const size_t tail = kTailPointTokens + match.left_before_end;
  if (!chunked && !exact && options_.checkpoint_tokens > 0 && n > tail)
    points.emplace_back(n - tail, PointKind::kTail);
  std::sort(points.begin(), points.end());
  auto same_place = [](const auto& a, const auto& b) { return a.first == b.first; };
  points.erase(std::unique(points.begin(), points.end(), same_place), points.end());
  std::erase_if(points,
                [&](const auto& p) { return p.first <= w.at || p.first < kMinInnerPointTokens; });
  points.emplace_back(n, PointKind::kEnd);
  return w;
}

void Scorer::ready(StateWork& w) const {
  w.cuts.clear();
  for (const auto& p : w.points) w.cuts.push_back(p.first - w.at);
  w.rest.assign(w.ids.begin() + static_cast<std::ptrdiff_t>(w.at), w.ids.end());
  w.from_state = w.from ? *w.from : model_->empty_state();
}

// Saves each point of `w` as its pass ends: a safe point (a state interrupted later keeps the
// points saved before, and a retry continues from them); the state's bookkeeping is done with
// its end, before any row that runs after it. `w` must outlive the run.
Model::StateAtCut Scorer::point_saver(StateWork& w) const {
  return [this, &w](size_t c, const PrefixState& s) {
    w.end = std::make_shared<const PrefixState>(s);
    computed_tokens_.fetch_add(w.cuts[c] - (c == 0 ? 0 : w.cuts[c - 1]), std::memory_order_relaxed);
    if (!w.cached) return;
    const std::span<const int32_t> all(w.ids);
    save_point(all.first(w.at + w.cuts[c]), w.end, w.points[c].second);
    if (c + 1 < w.cuts.size()) return;
    // An end of state that this longer state continued is covered by it: evict it first.
    if (w.at > 0 && w.from_kind != PointKind::kCheckpoint) cache_->demote(all.first(w.at));
    *w.reused = w.at;
    reused_tokens_.fetch_add(w.at, std::memory_order_relaxed);
  };
}

// Runs what `w` needs (every point in one extend_through: a short state's parts share one stream
// of the weights) and `rows` on the state, in its last pass when they fit.
std::shared_ptr<const PrefixState> Scorer::run_state(StateWork& w,
                                                     const std::vector<RowRequest>& rows,
                                                     std::vector<RowResult>& hidden,
                                                     const std::function<bool()>& gone) const {
  ready(w);
  hidden = model_->extend_through_rows(w.from_state, w.rest, w.cuts, point_saver(w), rows, gone);
  return w.end;
}

void Scorer::save_point(std::span<const int32_t> ids, const std::shared_ptr<const PrefixState>& s,
                        PointKind kind) const {
  std::vector<StateBuffer> buffers = cache_buffers(*s);
  // Checkpoints stay in memory: on disk a point holds all its keys/values alone, so a checkpoint
  // would write the conversation's keys/values once more for a rarer kind of reuse.
  if (store_ && kind != PointKind::kCheckpoint) {
    size_t bytes = 0;
    for (const StateBuffer& b : buffers) bytes += b.bytes;
    store_->save(ids, s, kind, bytes);
  }
  cache_->insert(ids, s, std::move(buffers), kind);
}

ScoreResult Scorer::score(std::string_view request_json) const {
  return score(parse_request(request_json));
}

// A request between its stages: prepared (encoded, usage, state prefix, rows), then finished
// (pointer head, response) from its rows' hidden states; error set at whichever stage failed.
struct Scorer::Pending {
  const ApiRequest* request = nullptr;
  std::function<bool()> gone;
  std::shared_ptr<const Encoding> given;  // ScoreJob::encoding
  Encoding enc;
  ScoreResult result;
  std::shared_ptr<const PrefixState> prefix;
  std::vector<RowRequest> rows;
  bool rows_done = false;  // ran with the state (hidden holds their results)
  std::vector<RowResult> hidden;
  StateWork work;  // its state's plan (prepare)
  size_t row_tokens = 0;
  std::exception_ptr error;
};

namespace {

// Whether what `earlier` is about to save could change the plan of `later`: both are cached and
// they share more ids than `later` continues from (a point of `earlier` there, or its end, which
// places `later`'s tail point). Then `later` is planned after `earlier` has run, as if the
// requests came one at a time.
template <class Work>
bool plan_depends_on(const Work& earlier, const Work& later) {
  if (!earlier.cached || !later.cached) return false;
  const size_t n = std::min(earlier.ids.size(), later.ids.size());
  const auto shared = static_cast<size_t>(
      std::mismatch(earlier.ids.begin(), earlier.ids.begin() + static_cast<std::ptrdiff_t>(n),
                    later.ids.begin())
          .first -
      earlier.ids.begin());
  return shared > later.at;
}

}  // namespace

void Scorer::run_together(const std::vector<Pending*>& group) const noexcept {
  std::vector<Pending*> members;
  std::vector<Model::StateJob> jobs;
  try {
    members.reserve(group.size());  // so that the push_back below cannot throw
    jobs.reserve(group.size());
  } catch (...) {
    for (Pending* p : group) p->error = std::current_exception();
    return;
  }
  for (Pending* p : group) {
    try {
      if (p->gone && p->gone())
        fail(ErrorKind::kInterrupted, "the client went away before its state was computed");
      ready(p->work);
      jobs.push_back({&p->work.from_state,
                      &p->work.rest,
                      p->work.cuts,
                      point_saver(p->work),
                      &p->rows,
                      {},
                      false});
      members.push_back(p);
    } catch (...) {
      p->error = std::current_exception();
    }
  }
  try {
    model_->extend_through_rows_together(jobs);
  } catch (...) {
    // A shared pass failed (e.g. out of memory): the jobs of the passes before it stand; each
    // other state runs alone, and gets its own result or error.
  }
  for (size_t i = 0; i < members.size(); ++i) {
    Pending& p = *members[i];
    try {
      if (jobs[i].done)
        p.hidden = std::move(jobs[i].results);
      else
        run_state(p.work, p.rows, p.hidden, p.gone);
      p.prefix = p.work.end;
      p.rows_done = true;
    } catch (...) {
      p.error = std::current_exception();
    }
  }
}

ScoreResult Scorer::score(const ApiRequest& request, const std::function<bool()>& gone) const {
  const ScoreJob job{&request, gone, nullptr};
  std::vector<ScoreOutcome> out = score_batch(std::span<const ScoreJob>(&job, 1));
  if (out[0].error) std::rethrow_exception(out[0].error);
  return std::move(out[0].result);
}

std::vector<ScoreOutcome> Scorer::score_batch(std::span<const ScoreJob> jobs) const {
  const auto start = std::chrono::steady_clock::now();
  std::vector<Pending> pending(jobs.size());
  // Requests one after the other: a state found whole waits for the shared rows pass below;
  // short states to compute (one pass each with their rows) gather into `group` and run in
  // shared passes; a longer one runs alone with its rows, after the group. A request whose plan
  // could depend on what a gathered one is about to save (plan_depends_on) runs after the group,
  // planned again, so every request finds what it would find if they came one at a time (but for
  // scorer.h's cached_tokens exception).
  std::vector<Pending*> group;
  for (size_t i = 0; i < jobs.size(); ++i) {
    Pending& p = pending[i];
    p.request = jobs[i].request;
    p.gone = jobs[i].gone;
    p.given = jobs[i].encoding;
    try {
      prepare(p);
      if (p.prefix) continue;
      if (std::any_of(group.begin(), group.end(),
                      [&](const Pending* g) { return plan_depends_on(g->work, p.work); })) {
        run_together(group);
        group.clear();
        p.work = plan_state(p.enc.state_ids(), &p.result.usage.cached_tokens);
        if (p.work.done) {
          p.prefix = p.work.done;
          continue;
        }
      }
      if (p.gone && p.gone())
        fail(ErrorKind::kInterrupted, "the client went away before its state was computed");
      if (model_->one_pass(p.work.ids.size() - p.work.at, p.row_tokens)) {
        group.push_back(&p);
        continue;
      }
      run_together(group);  // first, so that the cache sees the saves in request order
      group.clear();
      p.prefix = run_state(p.work, p.rows, p.hidden, p.gone);
      p.rows_done = true;
    } catch (...) {
      p.error = std::current_exception();
    }
  }
  run_together(group);
  // A client may have gone while the prefixes of the requests after its own were computed.
  std::vector<Pending*> live;
  for (Pending& p : pending) {
    if (p.error) continue;
    if (p.gone && p.gone()) {
      p.error = std::make_exception_ptr(
          Error(ErrorKind::kInterrupted, "the client went away before its rows were scored"));
      continue;
    }
    live.push_back(&p);
  }

  // Every live request's rows that did not run with its state in one pass, each row on its
  // request's own prefix.
  std::vector<Pending*> waiting;
  std::vector<const PrefixState*> prefixes;
  std::vector<RowRequest> rows;
  for (Pending* p : live) {
    if (p->rows_done) continue;
    waiting.push_back(p);
    for (RowRequest& r : p->rows) {
      prefixes.push_back(p->prefix.get());
      rows.push_back(std::move(r));
    }
  }
  try {
    std::vector<RowResult> all = model_->run_rows(prefixes, rows);
    size_t at = 0;
    for (Pending* p : waiting) {
      const size_t n = p->enc.rows.size();
      p->hidden.assign(std::make_move_iterator(all.begin() + static_cast<std::ptrdiff_t>(at)),
                       std::make_move_iterator(all.begin() + static_cast<std::ptrdiff_t>(at + n)));
      at += n;
    }
  } catch (...) {
    // The shared pass failed (e.g. out of memory): each request alone then gets its own result
    // or error, bitwise the same (a row's result does not depend on the rows beside it).
    size_t at = 0;
    for (Pending* p : waiting) {
      const size_t n = p->enc.rows.size();
      std::vector<RowRequest> own(rows.begin() + static_cast<std::ptrdiff_t>(at),
                                  rows.begin() + static_cast<std::ptrdiff_t>(at + n));
      at += n;
      try {
        p->hidden = model_->run_rows(*p->prefix, own);
      } catch (...) {
        p->error = std::current_exception();
      }
    }
  }

  for (Pending* p : live) {
    if (p->error) continue;
    try {
      finish(*p, std::move(p->hidden), start);
    } catch (...) {
      p->error = std::current_exception();
    }
  }
  std::vector<ScoreOutcome> out(jobs.size());
  for (size_t i = 0; i < jobs.size(); ++i) {
    out[i].error = pending[i].error;
    if (!out[i].error) out[i].result = std::move(pending[i].result);
  }
  return out;
}

Encoding Scorer::encode(const ApiRequest& request) const {
  return encode_record(tokenizer_, delimiters_, to_record(request), options_.limits);
}

void Scorer::prepare(Pending& p) const {
  const ApiRequest& request = *p.request;
  p.enc = p.given ? *p.given : encode(request);
  const Encoding& enc = p.enc;
  if (options_.max_input_tokens > 0 && enc.ids.size() > options_.max_input_tokens)
    fail(ErrorKind::kBadInput, "the request encodes to {} tokens; the limit is {} per request",
         enc.ids.size(), options_.max_input_tokens);
  const size_t s = enc.state_length;

  ScoreResult& result = p.result;
  result.usage.input_tokens = enc.ids.size();
  result.usage.state_tokens = s;
  result.usage.full_state_tokens = enc.state_tokens;
  result.usage.truncated = enc.truncated;
  // One row per question: its branch continues the state; read <decide> then every </opt>.
  std::vector<RowRequest>& rows = p.rows;
  rows.resize(enc.rows.size());
  for (size_t q = 0; q < rows.size(); ++q) {
    const EncodedRow& row = enc.rows[q];
    rows[q].ids = row.branch_ids;
    rows[q].readout.push_back(static_cast<int64_t>(row.decide - s));
    for (size_t o : row.options) rows[q].readout.push_back(static_cast<int64_t>(o - s));
  }
  for (const RowRequest& r : rows) p.row_tokens += r.ids.size();
  p.work = plan_state(enc.state_ids(), &result.usage.cached_tokens);
  if (p.work.done) p.prefix = p.work.done;
}

void Scorer::finish(Pending& p, std::vector<RowResult> hidden,
                    std::chrono::steady_clock::time_point start) const {
  const ApiRequest& request = *p.request;
  const Encoding& enc = p.enc;
  ScoreResult& result = p.result;
  const size_t d = head_.hidden();
  std::vector<HeadQuestion> questions(hidden.size());
  std::vector<size_t> counts(hidden.size());
  size_t total = 0;
  for (size_t q = 0; q < hidden.size(); ++q) {
    const std::vector<float>& h = hidden[q].hidden;
    counts[q] = enc.rows[q].options.size();
    questions[q].decide = std::span<const float>(h.data(), d);
    questions[q].options = std::span<const float>(h.data() + d, counts[q] * d);
    questions[q].num_options = counts[q];
    total += counts[q];
  }
  std::vector<float> logits(total), probs(total);
  HeadWorkspace workspace;
  head_.score_batch(questions, logits, probs, workspace);

  size_t at = 0;
  for (size_t q = 0; q < hidden.size(); ++q) {
    result.probabilities.emplace_back(probs.begin() + at, probs.begin() + at + counts[q]);
    result.logits.emplace_back(logits.begin() + at, logits.begin() + at + counts[q]);
    at += counts[q];
  }
  double latency =
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
  OrderedJson answers = answers_json(request, result.probabilities, {options_.decimals});
  // Kev 1.0's Server._body: usage is input_tokens and output_tokens; a truncating scorer adds the
  // whole state's tokens (state_tokens) and what was read (state_tokens_used), and on every
  // response whether it truncated. --usage-details adds kev's own fields.
  OrderedJson usage = {{"input_tokens", result.usage.input_tokens},
                       {"output_tokens", output_tokens(answers)}};
  if (options_.limits.truncate || options_.usage_details)
    usage["state_tokens"] = result.usage.full_state_tokens;
  if (options_.limits.truncate) usage["state_tokens_used"] = result.usage.state_tokens;
  if (options_.usage_details) {
    usage["cached_tokens"] = result.usage.cached_tokens;
    // The same count where OpenAI-style usage readers look for it.
    usage["input_tokens_details"] = {{"cached_tokens", result.usage.cached_tokens}};
  }
  result.response = {{"model", request.model},
                     {"answers", std::move(answers)},
                     {"usage", usage},
                     {"latency_ms", python_round(latency, 1)}};
  if (options_.limits.truncate) result.response["truncated"] = result.usage.truncated;
}

size_t Scorer::output_tokens(const OrderedJson& answers) const {
  return tokenizer_.encode(python_json_dumps(answers), true).size();
}

void Scorer::add_truncation_marks(OrderedJson& body, const ScoreUsage& usage) const {
  if (!options_.limits.truncate) return;
  body["truncated"] = usage.truncated;
  body["usage"]["state_tokens"] = usage.full_state_tokens;
  body["usage"]["state_tokens_used"] = usage.state_tokens;
}

OrderedJson Scorer::permute(const PermuteRequest& p, const std::function<bool()>& gone) const {
  const ApiQuestion& q = p.request.questions.at(p.question_index);
  ApiRequest one;
  one.model = p.request.model;
  one.state = p.request.state;
  PyRandom rng(p.seed);
  std::vector<size_t> identity(q.keys.size());
  for (size_t i = 0; i < identity.size(); ++i) identity[i] = i;
  OrderedJson runs = OrderedJson::array();
  ScoreUsage last;
  for (int i = 0; i < p.n_perm; ++i) {
    std::vector<size_t> order = identity;
    if (i > 0) rng.shuffle(order);
    ApiQuestion permuted = q;
    OrderedJson names = OrderedJson::array();
    for (size_t k = 0; k < order.size(); ++k) {
      permuted.keys[k] = q.keys[order[k]];
      permuted.options[k] = q.options[order[k]];
      names.push_back(permuted.keys[k]);
    }
    one.questions = {std::move(permuted)};
    ScoreResult r = score(one, gone);
    const OrderedJson& a = r.response["answers"][q.id];
    runs.push_back({{"order", std::move(names)},
                    {"probabilities", a["probabilities"]},
                    {"choice", a["choice"]},
                    {"latency_ms", r.response["latency_ms"]}});
    last = r.usage;
  }
  OrderedJson spread = OrderedJson::object();
  bool stable = true;
  for (const OrderedJson& run : runs) stable = stable && run["choice"] == runs.front()["choice"];
  for (const std::string& k : q.keys) {
    double lo = 0, hi = 0;
    for (size_t i = 0; i < runs.size(); ++i) {
      const double v = runs[i]["probabilities"][k].get<double>();
      lo = i == 0 ? v : std::min(lo, v);
      hi = i == 0 ? v : std::max(hi, v);
    }
    spread[k] = hi - lo;
  }
  OrderedJson body = {{"runs", std::move(runs)}, {"argmax_stable", stable}, {"spread", spread}};
  add_truncation_marks(body, last);
  return body;
}

OrderedJson Scorer::separate(const ApiRequest& request, const std::function<bool()>& gone) const {
  ApiRequest one;
  one.model = request.model;
  one.state = request.state;
  OrderedJson answers = OrderedJson::object();
  size_t input_tokens = 0;
  std::vector<double> latencies;
  ScoreUsage first;
  for (size_t i = 0; i < request.questions.size(); ++i) {
    one.questions = {request.questions[i]};
    ScoreResult r = score(one, gone);
    for (auto& [id, a] : r.response["answers"].items()) answers[id] = a;
    input_tokens += r.usage.input_tokens;
    latencies.push_back(r.response["latency_ms"].get<double>());
    if (i == 0) first = r.usage;
  }
  const size_t out_tokens = output_tokens(answers);
  OrderedJson body = {{"model", request.model},
                      {"answers", std::move(answers)},
                      {"usage", {{"input_tokens", input_tokens}, {"output_tokens", out_tokens}}},
                      {"latency_ms", python_round(python_sum(latencies), 1)}};
  add_truncation_marks(body, first);
  return body;
}

}  // namespace kev
