// The backend registry and the CPU backend (backend.h): layers.cpp over a kernel table, with
// the fast precisions' projections prepared once each (projections.h), and states of cpu_state.h.
#include "model/backend.h"

#include <algorithm>
#include <map>
#include <mutex>

#include <fmt/format.h>

#include "kev/core/error.h"
#include "kev/cpu/precision_kernels.h"
#include "model/cpu_state.h"
#include "model/layers.h"
#include "model/projections.h"

namespace kev {
namespace {

class CpuBackend final : public Backend {
 public:
  CpuBackend(const ModelWeights& w, const ModelKernels& kernels) : w_(w), kernels_(kernels) {}

  const char* name() const override { return "cpu"; }

  void prepare(const ForwardOptions& o) override {
    if (w_.quantized() && !runs_int8_weights(o.precision))
      fail(ErrorKind::kUnsupported,
           "this bundle stores its projections quantized ({}, kev quantize) and runs with "
           "--precision int8 or w8a8 only; --precision {} needs the BF16 bundle it was made from",
           w_.stored_kinds(), precision_name(o.precision));
    if (o.precision == Precision::kBf16 && !bf16_) bf16_ = prepare_bf16(w_, kernels_, o.threads);
    if (runs_int8_weights(o.precision) && !int8_) int8_ = prepare_int8(w_, o.threads);
  }

  void run(const ForwardOptions& o, std::vector<Segment>& segs, std::vector<float>& out,
           std::vector<PrefixState>* states) const override {
    run_layers(w_, o, kernels_, int8_.get(), bf16_.get(), segs, out, states);
  }

  std::shared_ptr<const BackendState> empty_state() const override {
    return empty_cpu_state(w_.config());
  }
  void check_state(const PrefixState& s) const override { check_cpu_state(w_.config(), s); }
  StateFootprint state_footprint() const override { return cpu_state_footprint(w_.config()); }
  std::string state_identity(const ForwardOptions& o) const override {
    std::string id = fmt::format("backend cpu; layout {}; precision {}; gdn {}", kCpuStateLayout,
                                 precision_name(o.precision),
                                 o.gdn == GdnMode::kChunked ? "chunked" : "recurrent");
    // fp32, int8 and w8a8 give the same bits on every CPU; bf16's dot kernel sums in its own order.
    // Which projections a fast mode reduces changes the bits too.
    if (o.precision == Precision::kBf16)
      id += fmt::format("; bf16 dot {}; reduced {}", bf16_kernel_name(kernels_.bf16_kernel()),
                        bf16_selection());
    if (runs_int8_weights(o.precision)) id += fmt::format("; reduced {}", int8_selection(w_));
    return id;
  }
  void write_state(const PrefixState& s, const StateSink& out) const override {
    write_cpu_state(w_.config(), s, out);
  }
  std::shared_ptr<const BackendState> read_state(int64_t length, StateSource& in) const override {
    return read_cpu_state(w_.config(), length, in);
  }

 private:
  const ModelWeights& w_;
  const ModelKernels kernels_;
  std::unique_ptr<Int8Weights> int8_;
  std::unique_ptr<Bf16DotWeights> bf16_;
};

// "cpu" from the start; others as they register.
struct Registry {
  Registry() {
    factories["cpu"] = [](const ModelWeights& w) { return make_cpu_backend(w, model_kernels()); };
  }
  std::mutex mutex;
  std::map<std::string, BackendFactory> factories;
};

Registry& registry() {
  static Registry r;
  return r;
}

}  // namespace

std::string Backend::state_identity(const ForwardOptions&) const {
  fail(ErrorKind::kUnsupported, "the {} backend does not write its states as bytes", name());
}
void Backend::write_state(const PrefixState&, const StateSink&) const {
  fail(ErrorKind::kUnsupported, "the {} backend does not write its states as bytes", name());
}
std::shared_ptr<const BackendState> Backend::read_state(int64_t, StateSource&) const {
  fail(ErrorKind::kUnsupported, "the {} backend does not read states from bytes", name());
}

std::unique_ptr<Backend> make_cpu_backend(const ModelWeights& w, const ModelKernels& kernels) {
  return std::make_unique<CpuBackend>(w, kernels);
}

void register_backend(const std::string& name, BackendFactory make) {
  Registry& r = registry();
  std::lock_guard lock(r.mutex);
  if (name.empty() || !make || r.factories.count(name))
    fail(ErrorKind::kInternal, "backend '{}': {}", name,
         name.empty() || !make ? "no name or no factory" : "registered already");
  r.factories.emplace(name, std::move(make));
}

std::vector<std::string> backend_names() {
  Registry& r = registry();
  std::lock_guard lock(r.mutex);
  std::vector<std::string> out;
  for (const auto& [name, make] : r.factories) out.push_back(name);
  return out;
}

std::unique_ptr<Backend> make_backend(const std::string& name, const ModelWeights& w) {
  BackendFactory make;
  {
    Registry& r = registry();
    std::lock_guard lock(r.mutex);
    auto it = r.factories.find(name);
    if (it != r.factories.end()) make = it->second;
  }
  if (!make)
    fail(ErrorKind::kBadInput, "no backend '{}' in this build (it has: {})", name,
         fmt::join(backend_names(), ", "));
  return make(w);
}

}  // namespace kev
