// The Model API (model.h): state and id checks, prefill in bounded steps, rows in bounded
// batches, precision switching. Each pass runs on the backend (backend.h; the CPU's: the layer
// math of layers.cpp, the projections of projections.cpp).
#include <algorithm>
#include <string>

#include "kev/core/error.h"
#include "kev/formats/bundle_manifest.h"
#include "kev/model/model.h"
#include "model/backend.h"
#include "model/layers.h"

namespace kev {
namespace {

constexpr auto kRowBatchTokens = static_cast<int64_t>(kRowPassTokens);  // per run_rows batch
static_assert(kPrefillStepTokens % kGdnChunkTokens == 0);

// Explicit positions, or (where none are given) the implicit ones start + i, start being the
// prefix's length, must lie in [0, kMaxPosition] (the range of the RoPE tables' sin/cos).
void check_ids(const ModelConfig& c, const std::vector<int32_t>& ids,
               const std::vector<int64_t>& positions, int64_t start, const std::string& what) {
  if (ids.empty()) fail(ErrorKind::kBadInput, "{} has no tokens", what);
  for (size_t i = 0; i < ids.size(); ++i)
    if (ids[i] < 0 || ids[i] >= c.vocab)
      fail(ErrorKind::kBadInput, "{}: token id {} at index {} is outside the vocabulary [0, {})",
           what, ids[i], i, c.vocab);
  if (!positions.empty() && positions.size() != ids.size())
    fail(ErrorKind::kBadInput, "{}: {} positions for {} tokens", what, positions.size(),
         ids.size());
  for (size_t i = 0; i < positions.size(); ++i)
    if (positions[i] < 0 || positions[i] > kMaxPosition)
      fail(ErrorKind::kBadInput, "{}: position {} at index {} is outside [0, {}]", what,
           positions[i], i, kMaxPosition);
  const auto n = static_cast<int64_t>(ids.size());
  if (positions.empty() && start + n - 1 > kMaxPosition) {
    const int64_t i = std::max<int64_t>(0, kMaxPosition + 1 - start);  // the first one beyond
    fail(ErrorKind::kBadInput, "{}: position {} at index {} is outside [0, {}]", what, start + i, i,
         kMaxPosition);
  }
}

// A segment of `len` ids continuing `from` (null for one continuing an earlier segment of its
// pass), whose implicit positions start at `start`; read: the rows whose hidden states are
// wanted (indices into ids; nullptr: all).
Segment make_segment(const PrefixState* from, int64_t start, const int32_t* ids, int64_t len,
                     const int64_t* positions, const std::vector<int64_t>* read) {
  Segment s;
  s.from = from;
  if (read) {
    s.read_all = false;
    s.read = *read;
    std::sort(s.read.begin(), s.read.end());
    s.read.erase(std::unique(s.read.begin(), s.read.end()), s.read.end());
  }
  s.ids = ids;
  s.len = len;
  if (positions)
    s.positions.assign(positions, positions + len);
  else
    for (int64_t i = 0; i < s.len; ++i) s.positions.push_back(start + i);
  return s;
}

// Row r's segment on a prefix of `length` tokens (`from`: null for one continuing a segment of
// its pass), after its checks (Error kBadInput).
Segment row_segment(const ModelConfig& c, const PrefixState* from, int64_t length,
                    const RowRequest& row, size_t r) {
  const std::string what = "row " + std::to_string(r);
  check_ids(c, row.ids, row.positions, length, what);
  for (int64_t i : row.readout)
    if (i < 0 || i >= static_cast<int64_t>(row.ids.size()))
      fail(ErrorKind::kBadInput, "{}: readout index {} is outside the row of {} tokens", what, i,
           row.ids.size());
  return make_segment(from, length, row.ids.data(), static_cast<int64_t>(row.ids.size()),
                      row.positions.empty() ? nullptr : row.positions.data(),
                      row.readout.empty() ? nullptr : &row.readout);
}

// Cuts ascending in [1, n], the last n (Error kInternal otherwise).
void check_cuts(const std::vector<size_t>& cuts, size_t n) {
  for (size_t c = 0; c < cuts.size(); ++c)
    if (cuts[c] == 0 || cuts[c] > n || (c > 0 && cuts[c] <= cuts[c - 1]))
      fail(ErrorKind::kInternal, "cut {} at {} of a prefix of {} tokens", c, cuts[c], n);
  if (cuts.empty() || cuts.back() != n)
    fail(ErrorKind::kInternal, "the cuts of a prefix of {} tokens do not end at its end", n);
}

// A run of a prefill: ids [begin, end), which ends at cut `cut` (if at_cut).
struct Piece {
  size_t begin = 0, end = 0;
  bool at_cut = false;
  size_t cut = 0;
};

// The parts between the cuts, each in steps of `step` from its own start (as extend() from each
// cut would run it).
std::vector<Piece> cut_pieces(const std::vector<size_t>& cuts, size_t step) {
  std::vector<Piece> pieces;
  size_t begin = 0;
  for (size_t c = 0; c < cuts.size(); ++c) {
    for (size_t b = begin; b < cuts[c]; b += step) {
      const size_t e = std::min(cuts[c], b + step);
      pieces.push_back(Piece{b, e, e == cuts[c], c});
    }
    begin = cuts[c];
  }
  return pieces;
}

// Copies a row's requested hidden states (all, or the readout positions) out of a batch.
void collect_row(const RowRequest& row, const Segment& s, const std::vector<float>& h, int64_t hd,
                 RowResult& res) {
  if (row.readout.empty()) {
    res.rows = s.len;
    res.hidden.assign(h.begin() + s.out_offset * hd, h.begin() + (s.out_offset + s.len) * hd);
    return;
  }
  res.rows = static_cast<int64_t>(row.readout.size());
  for (int64_t i : row.readout) {
    const int64_t at =
        s.out_offset +
        (s.read_all ? i : std::lower_bound(s.read.begin(), s.read.end(), i) - s.read.begin());
    res.hidden.insert(res.hidden.end(), h.begin() + at * hd, h.begin() + (at + 1) * hd);
  }
}

}  // namespace

Model::Model(std::unique_ptr<ModelWeights> weights, ForwardOptions options)
    : weights_(std::move(weights)) {
  set_options(options);
}
Model::~Model() = default;

void Model::set_options(const ForwardOptions& o) {
  const auto chunk = static_cast<size_t>(kGdnChunkTokens);
  if (o.prefill_step == 0 || o.prefill_step % chunk != 0)
    fail(ErrorKind::kBadInput, "prefill step of {} tokens: not a positive multiple of {}",
         o.prefill_step, chunk);
  if (!backend_ || o.backend != options_.backend) backend_ = make_backend(o.backend, *weights_);
  options_ = o;
  backend_->prepare(o);
}

std::unique_ptr<Model> Model::load(const std::string& model_dir, ForwardOptions options,
                                   const BundleManifest* manifest) {
  // An export bundle that records something this kev does not implement is refused here, so
  // kev forward refuses it as kev score and serve do (a base model directory has no manifest).
  if (!manifest && has_bundle_manifest(model_dir)) read_bundle_manifest(model_dir);
  return std::make_unique<Model>(ModelWeights::load(model_dir), options);
}

std::vector<StateBuffer> state_buffers(const PrefixState& s) {
  return s.data ? s.data->buffers() : std::vector<StateBuffer>{};
}

size_t bytes_held(const PrefixState& s) {
  size_t bytes = sizeof(PrefixState);
  if (!s.data) return bytes;
  bytes += s.data->bookkeeping_bytes();
  for (const StateBuffer& b : s.data->buffers()) bytes += b.bytes;
  return bytes;
}

StateFootprint Model::state_footprint() const {
  return backend_->state_footprint();
}

std::string Model::state_identity() const {
  return backend_->state_identity(options_);
}

void Model::write_state(const PrefixState& s, const StateSink& out) const {
  backend_->check_state(s);
  if (s.length < 1) fail(ErrorKind::kInternal, "an empty state is not written");
  backend_->write_state(s, out);
}

PrefixState Model::read_state(int64_t length, StateSource& in) const {
  if (length < 1) fail(ErrorKind::kBadInput, "a saved state of {} tokens", length);
  return PrefixState{length, backend_->read_state(length, in)};
}

PrefixState Model::empty_state() const {
  return PrefixState{0, backend_->empty_state()};
}

PrefixState Model::extend(const PrefixState& from, const std::vector<int32_t>& ids,
                          const std::vector<int64_t>& positions, std::vector<float>* hidden,
                          const std::function<bool()>& stop) const {
  PrefixState last;
  prefill(
      from, ids, positions, {ids.size()}, hidden, [&](size_t, const PrefixState& s) { last = s; },
      stop, nullptr);
  return last;
}

void Model::extend_through(const PrefixState& from, const std::vector<int32_t>& ids,
                           const std::vector<size_t>& cuts, const StateAtCut& on_state,
                           const std::function<bool()>& stop) const {
  prefill(from, ids, {}, cuts, nullptr, on_state, stop, nullptr);
}

std::vector<RowResult> Model::extend_through_rows(const PrefixState& from,
                                                  const std::vector<int32_t>& ids,
                                                  const std::vector<size_t>& cuts,
                                                  const StateAtCut& on_state,
                                                  const std::vector<RowRequest>& rows,
                                                  const std::function<bool()>& stop) const {
  std::vector<RowResult> results;
  prefill(from, ids, {}, cuts, nullptr, on_state, stop, &rows, &results);
  return results;
}

bool Model::one_pass(size_t state_tokens, size_t row_tokens) const {
  return state_tokens <= options_.prefill_step &&
         state_tokens + row_tokens <= static_cast<size_t>(kRowBatchTokens);
}

void Model::extend_through_rows_together(std::vector<StateJob>& jobs) const {
  // Each job's segments (its parts chained, then its rows on its last part), checked up front.
  struct Placed {
    std::vector<Segment> segs;
    std::vector<Piece> pieces;
    size_t tokens = 0;
  };
  std::vector<Placed> placed(jobs.size());
  static const std::vector<int64_t> kNone;
  for (size_t j = 0; j < jobs.size(); ++j) {
    const StateJob& job = jobs[j];
    backend_->check_state(*job.from);
    check_ids(config(), *job.ids, {}, job.from->length, "prefix");
    check_cuts(job.cuts, job.ids->size());
    Placed& pl = placed[j];
    pl.pieces = cut_pieces(job.cuts, options_.prefill_step);
    int64_t start = job.from->length;
    for (size_t i = 0; i < pl.pieces.size(); ++i) {
      const auto len = static_cast<int64_t>(pl.pieces[i].end - pl.pieces[i].begin);
      pl.segs.push_back(make_segment(i == 0 ? job.from : nullptr, start,
                                     job.ids->data() + pl.pieces[i].begin, len, nullptr, &kNone));
      pl.segs.back().continues = static_cast<int64_t>(i) - 1;  // within the job, -1 for the first
      pl.segs.back().keep_state = pl.pieces[i].at_cut;
      start += len;
    }
    size_t row_tokens = 0;
    for (size_t r = 0; r < job.rows->size(); ++r) {
      pl.segs.push_back(row_segment(config(), nullptr, start, (*job.rows)[r], r));
      pl.segs.back().continues = static_cast<int64_t>(pl.pieces.size()) - 1;
      row_tokens += (*job.rows)[r].ids.size();
    }
    if (!one_pass(job.ids->size(), row_tokens))
      fail(ErrorKind::kInternal, "a state of {} tokens with {} row tokens is not one pass",
           job.ids->size(), row_tokens);
    pl.tokens = job.ids->size() + row_tokens;
  }
  // Passes of whole jobs up to kRowBatchTokens tokens.
  for (size_t a = 0; a < jobs.size();) {
    size_t b = a, tokens = 0;
    for (; b < jobs.size(); ++b) {
      if (b > a && tokens + placed[b].tokens > static_cast<size_t>(kRowBatchTokens)) break;
      tokens += placed[b].tokens;
    }
    std::vector<Segment> segs;
    std::vector<size_t> first(b - a);
    for (size_t j = a; j < b; ++j) {
      first[j - a] = segs.size();
      for (const Segment& s : placed[j].segs) {
        segs.push_back(s);
        if (s.continues >= 0) segs.back().continues += static_cast<int64_t>(first[j - a]);
      }
    }
    std::vector<PrefixState> states;
    std::vector<float> h;
    backend_->run(options_, segs, h, &states);
    size_t k = 0;
    for (size_t j = a; j < b; ++j) {
      const Placed& pl = placed[j];
      for (const Piece& piece : pl.pieces)
        if (piece.at_cut) jobs[j].on_state(piece.cut, states.at(k++));
      jobs[j].results.clear();
      jobs[j].results.resize(jobs[j].rows->size());
      for (size_t r = 0; r < jobs[j].rows->size(); ++r)
        collect_row((*jobs[j].rows)[r], segs[first[j - a] + pl.pieces.size() + r], h,
                    config().hidden, jobs[j].results[r]);
      jobs[j].done = true;
    }
    a = b;
  }
}

void Model::prefill(const PrefixState& from, const std::vector<int32_t>& ids,
                    const std::vector<int64_t>& positions, const std::vector<size_t>& cuts,
                    std::vector<float>* hidden, const StateAtCut& on_state,
                    const std::function<bool()>& stop, const std::vector<RowRequest>* rows,
                    std::vector<RowResult>* results) const {
  backend_->check_state(from);
  check_ids(config(), ids, positions, from.length, "prefix");
  // The rows, checked before anything runs; they join the state's last pass when that pass and
  // they fit one row batch (kRowBatchTokens), else run as run_rows runs them after it.
  const int64_t end_length = from.length + static_cast<int64_t>(ids.size());
  std::vector<Segment> row_segs;
  int64_t row_tokens = 0;
  for (size_t r = 0; rows && r < rows->size(); ++r) {
    row_segs.push_back(row_segment(config(), nullptr, end_length, (*rows)[r], r));
    row_tokens += row_segs.back().len;
  }
  check_cuts(cuts, ids.size());
  // A long part runs in steps of options_.prefill_step (a multiple of the GDN chunk), each
  // continuing the state of the one before: the workspace stays bounded, and by the prefix
  // contract (prefix + row == one pass) the result is the same as one pass. The pieces of
  // consecutive parts share a pass up to that many tokens, each continuing the one before in it.
  if (hidden) hidden->clear();
  const std::vector<Piece> pieces = cut_pieces(cuts, options_.prefill_step);
  // Without `hidden` no row is read: the last layer keeps only what the state holds.
  static const std::vector<int64_t> kNone;
  PrefixState current = from;
  for (size_t p = 0; p < pieces.size();) {
    if (p > 0 && stop && stop())
      fail(ErrorKind::kInterrupted, "stopped after {} of the prefix's {} tokens", pieces[p].begin,
           ids.size());
    size_t q = p, tokens = 0;
    for (; q < pieces.size(); ++q) {
      const size_t len = pieces[q].end - pieces[q].begin;
      if (q > p && tokens + len > options_.prefill_step) break;
      tokens += len;
    }
    std::vector<Segment> segs;
    int64_t start = current.length;
    for (size_t i = p; i < q; ++i) {
      const auto len = static_cast<int64_t>(pieces[i].end - pieces[i].begin);
      const int64_t* pos = positions.empty() ? nullptr : positions.data() + pieces[i].begin;
      segs.push_back(make_segment(i == p ? &current : nullptr, start, ids.data() + pieces[i].begin,
                                  len, pos, hidden ? nullptr : &kNone));
      if (i > p) segs.back().continues = static_cast<int64_t>(i - p - 1);
      segs.back().keep_state = pieces[i].at_cut || i + 1 == q;
      start += len;
    }
    const bool with_rows = rows && !rows->empty() && q == pieces.size() &&
                           static_cast<int64_t>(tokens) + row_tokens <= kRowBatchTokens;
    const size_t state_segs = segs.size();
    if (with_rows)
      for (Segment& r : row_segs) {
        r.continues = static_cast<int64_t>(state_segs - 1);
        segs.push_back(std::move(r));
      }
    std::vector<PrefixState> states;
    std::vector<float> h;
    backend_->run(options_, segs, h, &states);
    if (hidden) hidden->insert(hidden->end(), h.begin(), h.end());
    if (with_rows) {
      results->resize(rows->size());
      for (size_t r = 0; r < rows->size(); ++r)
        collect_row((*rows)[r], segs[state_segs + r], h, config().hidden, (*results)[r]);
      rows = nullptr;  // done
    }
    size_t k = 0;
    for (size_t i = p; i < q; ++i) {
      if (!segs[i - p].keep_state) continue;
      const PrefixState& s = states.at(k++);
      if (pieces[i].at_cut) on_state(pieces[i].cut, s);
      if (i + 1 == q) current = s;
    }
    p = q;
  }
  if (!rows) return;
  if (stop && stop())
    fail(ErrorKind::kInterrupted, "stopped after the prefix's {} tokens, before its rows",
         ids.size());
  *results = run_rows(current, *rows);
}

std::vector<RowResult> Model::run_rows(const PrefixState& prefix,
                                       const std::vector<RowRequest>& rows) const {
  return run_rows(std::vector<const PrefixState*>(rows.size(), &prefix), rows);
}

std::vector<RowResult> Model::run_rows(const std::vector<const PrefixState*>& prefixes,
                                       const std::vector<RowRequest>& rows) const {
  if (prefixes.size() != rows.size())
    fail(ErrorKind::kInternal, "run_rows: {} prefixes for {} rows", prefixes.size(), rows.size());
  std::vector<Segment> segs;
  for (size_t r = 0; r < rows.size(); ++r) {
    if (!prefixes[r]) fail(ErrorKind::kInternal, "run_rows: row {} has no prefix", r);
    // Rows mostly share a few prefixes: check each distinct one once.
    if (r == 0 || prefixes[r] != prefixes[r - 1]) backend_->check_state(*prefixes[r]);
    segs.push_back(row_segment(config(), prefixes[r], prefixes[r]->length, rows[r], r));
  }
  std::vector<RowResult> results(rows.size());
  // Rows run in batches of at most kRowBatchTokens tokens (a longer row runs alone): the
  // workspace grows with the tokens of a batch, and rows are independent (each reads only its
  // own prefix's cache), so batching only bounds memory and never changes a result.
  const int64_t hd = config().hidden;
  for (size_t first = 0; first < rows.size();) {
    size_t last = first + 1;
    int64_t tokens = static_cast<int64_t>(rows[first].ids.size());
    while (last < rows.size() &&
           tokens + static_cast<int64_t>(rows[last].ids.size()) <= kRowBatchTokens)
      tokens += static_cast<int64_t>(rows[last++].ids.size());
    std::vector<Segment> batch(segs.begin() + static_cast<std::ptrdiff_t>(first),
                               segs.begin() + static_cast<std::ptrdiff_t>(last));
    std::vector<float> h;
    backend_->run(options_, batch, h, nullptr);
    for (size_t r = first; r < last; ++r) collect_row(rows[r], batch[r - first], h, hd, results[r]);
    first = last;
  }
  return results;
}

}  // namespace kev