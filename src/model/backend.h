// The seam between the Model (model.h: its API, the checks of ids and states, the cutting of work
// into prefill steps and row batches) and what runs the layers: a backend. A backend owns its
// kernels and what it prepares from the weights for a precision (the packed or quantized
// projections), and runs one pass: segments, each continuing its own prefix state (or an earlier
// segment of the pass), through every layer. The CPU backend (cpu_backend.cpp: layers.cpp over a
// ModelKernels table) is registered as "cpu" and is the default; another device is a folder with
// its Backend and one register_backend call before its first Model. The tests register a second
// backend (the CPU layers over the portable kernel table) to prove that the seam carries a whole
// forward.
//
// A backend also owns the prefix states it makes (model.h: PrefixState holds a BackendState):
// the CPU's are host memory (cpu_state.h); a device's may live on the device, the Model and the
// prefix cache only count their buffers.
//
// Contract of run(): run_layers' (layers.h): the final-normed hidden states of the read rows,
// segment after segment; in `states` the extended state of each segment that keeps it. A
// segment may continue another of the same pass (Segment::continues): the pass then runs the
// layer's mixing segment after segment along the chain, and its projections once for all the
// rows, so one stream of the weights makes every point of a state. A backend keeps
// the Model's guarantees (model.h): a row's bits do not depend on the rows beside it, the batch,
// the thread count or the prefill step.
// Thread safety: the registry may be used from any thread; run() may run on several threads at
// once (it only reads the backend); prepare() is never concurrent with run() (Model's contract
// for set_options).
#pragma once
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "kev/cpu/model_kernels.h"
#include "kev/model/model.h"
#include "kev/model/weights.h"

namespace kev {

// One unit of a pass: a prefix state and the tokens that continue it.
struct Segment {
  const PrefixState* from;  // the state this segment continues (not read when continues >= 0)
  const int32_t* ids;
  std::vector<int64_t> positions;
  int64_t len = 0, offset = 0;  // rows [offset, offset + len) of the batch
  // The rows whose final hidden states are read: all, or `read` (indices into the segment,
  // ascending, unique; empty for a prefill that reads none). out_offset: where the segment's
  // first read row lands in the pass's output.
  bool read_all = true;
  std::vector<int64_t> read;
  int64_t out_offset = 0;
  // continues >= 0: this segment continues the extended state of that earlier segment of the
  // same pass (which is as if it had been made by a pass before; `from` is then not read).
  // keep_state: the pass returns this segment's extended state.
  int64_t continues = -1;
  bool keep_state = false;
};

class Backend {
 public:
  virtual ~Backend() = default;
  virtual const char* name() const = 0;
  // Makes ready what `options` needs (a fast precision's prepared projections), once each.
  virtual void prepare(const ForwardOptions& options) = 0;
  // states (if not null) receives the extended state of each segment with keep_state, in
  // segment order.
  virtual void run(const ForwardOptions& options, std::vector<Segment>& segs,
                   std::vector<float>& out, std::vector<PrefixState>* states) const = 0;
  // The state before any token.
  virtual std::shared_ptr<const BackendState> empty_state() const = 0;
  // Error(kInternal) unless run() can continue `s` (a state of this backend's kind, for these
  // weights).
  virtual void check_state(const PrefixState& s) const = 0;
  // The bytes its states hold (model.h), as it sizes their buffers.
  virtual StateFootprint state_footprint() const = 0;
  // States as bytes (model.h Model::state_identity / write_state / read_state; state_bytes.h).
  // The defaults: a backend that keeps no state on the host refuses (Error kUnsupported).
  virtual std::string state_identity(const ForwardOptions& options) const;
  virtual void write_state(const PrefixState& s, const StateSink& out) const;
  virtual std::shared_ptr<const BackendState> read_state(int64_t length, StateSource& in) const;
};

// Makes a backend for a model's weights (which outlive it).
using BackendFactory = std::function<std::unique_ptr<Backend>(const ModelWeights&)>;
// Registers `name` (Error kInternal if it is taken or empty).
void register_backend(const std::string& name, BackendFactory make);
// The registered backend `name` for these weights; Error kBadInput naming the registered ones if
// there is none.
std::unique_ptr<Backend> make_backend(const std::string& name, const ModelWeights& w);
std::vector<std::string> backend_names();  // registered, sorted; "cpu" always

// The CPU backend over a given kernel table (the "cpu" backend uses model_kernels()).
std::unique_ptr<Backend> make_cpu_backend(const ModelWeights& w, const ModelKernels& kernels);

}  // namespace kev
