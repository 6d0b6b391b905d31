#include "kev/serve/scorer.h"

#include <algorithm>
#include <chrono>

#include "kev/core/error.h"
#include "kev/core/py_random.h"

namespace kev {

Scorer::Scorer(const std::string& bundle_dir, ScorerOptions options)
    : options_(options),
      tokenizer_(Tokenizer::from_file(bundle_dir + "/tokenizer.json")),
      delimiters_(Delimiters::from(tokenizer_)),
      model_(Model::load(bundle_dir, options.forward)),
      head_(PointerHead::load_bundle(bundle_dir)),
      cache_(
          std::make_unique<PrefixCache<PrefixState>>(options.cache_entries, options.cache_tokens)) {
  const ModelConfig& c = model_->config();
  if (static_cast<int64_t>(head_.hidden()) != c.hidden)
    fail(ErrorKind::kBadInput,
         "{}: head.safetensors expects hidden size {} but config.json says {}", bundle_dir,
         head_.hidden(), c.hidden);
  if (tokenizer_.vocab_size() > c.vocab)
    fail(ErrorKind::kBadInput, "{}: tokenizer.json has {} ids but the model's vocabulary is {}",
         bundle_dir, tokenizer_.vocab_size(), c.vocab);
}

std::shared_ptr<const PrefixState> Scorer::state_prefix(const std::vector<int32_t>& ids,
                                                        bool* cached) const {
  if (ids.size() < options_.cache_min_tokens) {  // too short to be worth caching (upstream)
    *cached = false;
    return std::make_shared<const PrefixState>(model_->extend(model_->empty_state(), ids));
  }
  if (auto hit = cache_->find(ids)) {
    *cached = true;
    return hit;
  }
  *cached = false;
  auto state = std::make_shared<const PrefixState>(model_->extend(model_->empty_state(), ids));
  cache_->insert(ids, state);
  return state;
}

ScoreResult Scorer::score(std::string_view request_json) const {
  return score(parse_request(request_json));
}

ScoreResult Scorer::score(const ApiRequest& request, const std::function<bool()>& gone) const {
  auto start = std::chrono::steady_clock::now();
  Encoding enc = encode_record(tokenizer_, delimiters_, to_record(request), options_.limits);
  if (enc.ids.size() > options_.max_input_tokens)
    fail(ErrorKind::kBadInput, "the request encodes to {} tokens; the limit is {} per request",
         enc.ids.size(), options_.max_input_tokens);
  const size_t s = enc.state_length;

  ScoreResult result;
  result.usage.input_tokens = enc.ids.size();
  result.usage.state_tokens = s;
  result.usage.full_state_tokens = enc.state_tokens;
  result.usage.truncated = enc.truncated;
  bool cached = false;
  auto prefix = state_prefix(enc.state_ids(), &cached);
  result.usage.cached_tokens = cached ? s : 0;
  if (gone && gone())
    fail(ErrorKind::kInterrupted, "the client went away before its rows were scored");

  // One row per question: its branch continues the state; read <decide> then every </opt>.
  std::vector<RowRequest> rows(enc.rows.size());
  for (size_t q = 0; q < rows.size(); ++q) {
    const EncodedRow& row = enc.rows[q];
    rows[q].ids = row.branch_ids;
    rows[q].readout.push_back(static_cast<int64_t>(row.decide - s));
    for (size_t o : row.options) rows[q].readout.push_back(static_cast<int64_t>(o - s));
  }
  std::vector<RowResult> hidden = model_->run_rows(*prefix, rows);

  const size_t d = head_.hidden();
  std::vector<HeadQuestion> questions(rows.size());
  std::vector<size_t> counts(rows.size());
  size_t total = 0;
  for (size_t q = 0; q < rows.size(); ++q) {
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
  for (size_t q = 0; q < rows.size(); ++q) {
    result.probabilities.emplace_back(probs.begin() + at, probs.begin() + at + counts[q]);
    at += counts[q];
  }
  double latency =
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
  OrderedJson answers = answers_json(request, result.probabilities, {options_.decimals});
  // Upstream's usage: state_tokens is the whole state; a truncating scorer also says what was
  // read (state_tokens_used) and, on every response, whether it truncated.
  OrderedJson usage = {{"input_tokens", result.usage.input_tokens},
                       {"output_tokens", output_tokens(answers)},
                       {"state_tokens", result.usage.full_state_tokens}};
  if (options_.limits.truncate) usage["state_tokens_used"] = result.usage.state_tokens;
  usage["cached_tokens"] = result.usage.cached_tokens;
  result.response = {{"model", request.model},
                     {"answers", std::move(answers)},
                     {"usage", usage},
                     {"latency_ms", python_round(latency, 3)}};
  if (options_.limits.truncate) result.response["truncated"] = result.usage.truncated;
  return result;
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
  double latency = 0;
  ScoreUsage first;
  for (size_t i = 0; i < request.questions.size(); ++i) {
    one.questions = {request.questions[i]};
    ScoreResult r = score(one, gone);
    for (auto& [id, a] : r.response["answers"].items()) answers[id] = a;
    input_tokens += r.usage.input_tokens;
    latency += r.response["latency_ms"].get<double>();
    if (i == 0) first = r.usage;
  }
  const size_t out_tokens = output_tokens(answers);
  OrderedJson body = {{"model", request.model},
                      {"answers", std::move(answers)},
                      {"usage", {{"input_tokens", input_tokens}, {"output_tokens", out_tokens}}},
                      {"latency_ms", python_round(latency, 1)}};
  add_truncation_marks(body, first);
  return body;
}

}  // namespace kev
