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

// read: the rows whose hidden states are wanted (indices into ids; nullptr: all).
Segment make_segment(const PrefixState& from, const std::vector<int32_t>& ids,
                     const std::vector<int64_t>& positions, const std::vector<int64_t>* read) {
  Segment s;
  s.from = &from;
  if (read) {
    s.read_all = false;
    s.read = *read;
    std::sort(s.read.begin(), s.read.end());
    s.read.erase(std::unique(s.read.begin(), s.read.end()), s.read.end());
  }
  s.ids = ids.data();
  s.len = static_cast<int64_t>(ids.size());
  if (positions.empty())
    for (int64_t i = 0; i < s.len; ++i) s.positions.push_back(from.length + i);
  else
    s.positions = positions;
  return s;
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
  backend_->check_state(from);
  check_ids(config(), ids, positions, from.length, "prefix");
  // A long prefix runs in steps of options_.prefill_step (a multiple of the GDN chunk), each
  // continuing the state of the one before: the workspace stays bounded, and by the prefix
  // contract (prefix + row == one pass) the result is the same as one pass.
  if (hidden) hidden->clear();
  const PrefixState* current = &from;
  PrefixState next;
  for (size_t begin = 0; begin < ids.size(); begin += options_.prefill_step) {
    if (begin > 0 && stop && stop())
      fail(ErrorKind::kInterrupted, "stopped after {} of the prefix's {} tokens", begin,
           ids.size());
    const size_t end = std::min(ids.size(), begin + options_.prefill_step);
    const auto b = static_cast<std::ptrdiff_t>(begin), e = static_cast<std::ptrdiff_t>(end);
    std::vector<int32_t> part(ids.begin() + b, ids.begin() + e);
    std::vector<int64_t> part_positions;
    if (!positions.empty()) part_positions.assign(positions.begin() + b, positions.begin() + e);
    // Without `hidden` no row is read: the last layer keeps only what the state holds.
    static const std::vector<int64_t> kNone;
    std::vector<Segment> segs{
        make_segment(*current, part, part_positions, hidden ? nullptr : &kNone)};
    PrefixState out;
    std::vector<float> h;
    backend_->run(options_, segs, h, &out);
    if (hidden) hidden->insert(hidden->end(), h.begin(), h.end());
    next = std::move(out);
    current = &next;
  }
  return next;
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
    std::string what = "row " + std::to_string(r);
    check_ids(config(), rows[r].ids, rows[r].positions, prefixes[r]->length, what);
    for (int64_t i : rows[r].readout)
      if (i < 0 || i >= static_cast<int64_t>(rows[r].ids.size()))
        fail(ErrorKind::kBadInput, "{}: readout index {} is outside the row of {} tokens", what, i,
             rows[r].ids.size());
    segs.push_back(make_segment(*prefixes[r], rows[r].ids, rows[r].positions,
                                rows[r].readout.empty() ? nullptr : &rows[r].readout));
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