// kev_native._core: the scoring library (kev::Scorer, the in-process path of `kev score`) as a
// Python extension. kev_native/__init__.py wraps it (dict requests, score_many, docs).
//
// Contract: a request's answer is response.dump() of the Scorer, after the request decoder of
// `kev score` / `kev serve` (same limits), so it is the same bytes as theirs. Every call that
// computes releases the GIL; a Model is safe from several Python threads (Scorer is thread-safe;
// head() uses a workspace per call). A kev::Error (or a decoder refusal) is raised as the
// kev_native exception class of its ErrorKind, a subclass of kev_native.Error, carrying kev's
// one sentence and the attributes kind, exit_code and http_status.
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <array>
#include <cstring>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "kev/core/error.h"
#include "kev/core/threads.h"
#include "kev/cpu/isa.h"
#include "kev/head/pointer_head.h"
#include "kev/model/model.h"
#include "kev/score/scorer.h"
#include "kev/text/request_decoder.h"

namespace py = pybind11;

namespace kev::python {
namespace {

// A decoder refusal: its HTTP status may be 400 (not JSON), which no ErrorKind maps to.
struct Refused {
  Refusal refusal;
};

constexpr std::array<ErrorKind, 7> kKinds = {
    ErrorKind::kBadInput, ErrorKind::kIntegrity,   ErrorKind::kIo,      ErrorKind::kUnsupported,
    ErrorKind::kOverload, ErrorKind::kInterrupted, ErrorKind::kInternal};
constexpr std::array<const char*, 7> kClassNames = {
    "BadInputError", "IntegrityError", "IoError",      "UnsupportedError",
    "OverloadError", "InterruptError", "InternalError"};
std::array<PyObject*, 7> kind_classes{};  // owned by the module (kept alive for the process)

void raise(ErrorKind kind, int status, const std::string& message) {
  size_t i = 0;
  while (i + 1 < kKinds.size() && kKinds[i] != kind) ++i;
  py::handle cls(kind_classes[i]);
  py::object exc = cls(message);
  exc.attr("kind") = kind_name(kind);
  exc.attr("exit_code") = exit_code(kind);
  exc.attr("http_status") = status;
  PyErr_SetObject(cls.ptr(), exc.ptr());
}

template <class Request>
Request take(Decoded<Request> decoded) {
  if (auto* refused = std::get_if<Refusal>(&decoded)) throw Refused{std::move(*refused)};
  return std::move(std::get<Request>(decoded));
}

class Model {
 public:
  Model(const std::string& bundle, const std::string& precision, std::optional<long> threads,
        std::optional<double> temperature, int decimals, bool truncate, bool date_facts,
        bool usage_details, std::optional<std::string> state_dir) {
    check_isa_environment();
    check_threads_environment();
    ScorerOptions o;
    if (precision != "fp32" && precision != "bf16" && precision != "int8" && precision != "w8a8")
      fail(ErrorKind::kBadInput, "precision must be fp32, bf16, int8 or w8a8, not \"{}\"",
           precision.substr(0, 40));
    o.forward.precision = parse_precision(precision);
    if (threads) {
      if (*threads < 1) fail(ErrorKind::kBadInput, "threads must be at least 1, not {}", *threads);
      o.forward.threads = static_cast<size_t>(*threads);
    }
    if (temperature) {
      check_temperature(*temperature, "temperature");
      o.temperature = *temperature;
    }
    o.decimals = decimals;
    o.limits.truncate = truncate;
    o.usage_details = usage_details;
    if (state_dir) {
      if (state_dir->empty()) fail(ErrorKind::kBadInput, "state_dir must name a directory");
      o.state_dir = *state_dir;  // saved points on disk (docs/saved-states.md)
    }
    decode_.date_facts = date_facts;
    py::gil_scoped_release unlocked;
    scorer_ = std::make_unique<Scorer>(bundle, o);
  }

  std::string system_one_json(const std::string& body) const {
    py::gil_scoped_release unlocked;
    return scorer_->score(take(decode_request(body, decode_))).response.dump();
  }
  std::string permute_json(const std::string& body) const {
    py::gil_scoped_release unlocked;
    return scorer_->permute(take(decode_permute_request(body, decode_))).dump();
  }
  std::string separate_json(const std::string& body) const {
    py::gil_scoped_release unlocked;
    return scorer_->separate(take(decode_request(body, decode_))).dump();
  }

  // Final-normed hidden states: one float32 [len, hidden] array per row, each row its own
  // continuation of the prefix (as `kev forward`).
  std::vector<py::array_t<float>> forward(const std::vector<std::vector<int32_t>>& rows,
                                          const std::optional<std::vector<int32_t>>& prefix) const {
    std::vector<RowRequest> requests(rows.size());
    for (size_t i = 0; i < rows.size(); ++i) {
      if (rows[i].empty()) fail(ErrorKind::kBadInput, "forward: row {} has no token ids", i);
      requests[i].ids = rows[i];
    }
    std::vector<RowResult> results;
    {
      py::gil_scoped_release unlocked;
      const kev::Model& model = scorer_->model();
      PrefixState state = model.empty_state();
      if (prefix && !prefix->empty()) state = model.extend(state, *prefix);
      if (!requests.empty()) results = model.run_rows(state, requests);
    }
    const auto hidden = static_cast<py::ssize_t>(scorer_->model().config().hidden);
    std::vector<py::array_t<float>> out;
    for (const RowResult& r : results) {
      py::array_t<float> a({static_cast<py::ssize_t>(r.rows), hidden});
      std::memcpy(a.mutable_data(), r.hidden.data(), r.hidden.size() * sizeof(float));
      out.push_back(std::move(a));
    }
    return out;
  }

  // One question's pointer head: hidden [1 + K, d] (the decide state, then the K option
  // states) -> (raw logits [K], probabilities [K] = softmax(logits / T)).
  std::pair<py::array_t<float>, py::array_t<float>> head(
      const py::array_t<float, py::array::c_style | py::array::forcecast>& hidden) const {
    const PointerHead& h = scorer_->head();
    const size_t d = h.hidden();
    if (hidden.ndim() != 2 || static_cast<size_t>(hidden.shape(1)) != d || hidden.shape(0) < 2)
      fail(ErrorKind::kBadInput,
           "head: hidden must be a [1 + options, {}] array (the decide state, then each option's)",
           d);
    const size_t k = static_cast<size_t>(hidden.shape(0)) - 1;
    if (k > kMaxOptions)
      fail(ErrorKind::kBadInput, "head: {} options (1 to {} are allowed)", k, kMaxOptions);
    std::vector<float> values(hidden.data(), hidden.data() + (k + 1) * d);
    py::array_t<float> logits(static_cast<py::ssize_t>(k)), probs(static_cast<py::ssize_t>(k));
    std::vector<float> l(k), p(k);
    {
      py::gil_scoped_release unlocked;
      HeadQuestion q{.decide = std::span<const float>(values.data(), d),
                     .options = std::span<const float>(values.data() + d, k * d),
                     .num_options = k};
      HeadWorkspace ws;
      h.score_batch(std::span<const HeadQuestion>(&q, 1), l, p, ws);
    }
    std::memcpy(logits.mutable_data(), l.data(), k * sizeof(float));
    std::memcpy(probs.mutable_data(), p.data(), k * sizeof(float));
    return {std::move(logits), std::move(probs)};
  }

  size_t hidden() const { return scorer_->model().config().hidden; }
  double temperature() const { return scorer_->head().temperature(); }

 private:
  std::unique_ptr<Scorer> scorer_;
  // As `kev score` and `kev serve` by default.
  DecodeOptions decode_{.json = {.max_object_keys = 16384, .max_array_elements = 16384}};
};

}  // namespace
}  // namespace kev::python

PYBIND11_MODULE(_core, m) {
  using namespace kev;
  using kev::python::Model;
  m.doc() = "kev_native._core: the kev scoring library (use the kev_native package)";
  m.attr("__version__") = KEV_VERSION;

  static PyObject* base = PyErr_NewExceptionWithDoc(
      "kev_native.Error", "A refusal of kev: one sentence; kind, exit_code, http_status.",
      PyExc_Exception, nullptr);
  if (!base) throw py::error_already_set();
  m.add_object("Error", py::handle(base));
  for (size_t i = 0; i < python::kKinds.size(); ++i) {
    const std::string name = std::string("kev_native.") + python::kClassNames[i];
    PyObject* cls = PyErr_NewException(name.c_str(), base, nullptr);
    if (!cls) throw py::error_already_set();
    python::kind_classes[i] = cls;
    m.add_object(python::kClassNames[i], py::handle(cls));
  }
  py::register_exception_translator([](std::exception_ptr p) {
    try {
      if (p) std::rethrow_exception(p);
    } catch (const python::Refused& r) {
      python::raise(r.refusal.kind, r.refusal.status, r.refusal.detail);
    } catch (const Error& e) {
      python::raise(e.kind(), http_status(e.kind()), e.what());
    }
  });

  py::class_<Model>(m, "Model")
      .def(py::init<const std::string&, const std::string&, std::optional<long>,
                    std::optional<double>, int, bool, bool, bool, std::optional<std::string>>(),
           py::arg("bundle"), py::arg("precision") = "fp32", py::arg("threads") = py::none(),
           py::arg("temperature") = py::none(), py::arg("decimals") = 4,
           py::arg("truncate") = false, py::arg("date_facts") = false,
           py::arg("usage_details") = false, py::arg("state_dir") = py::none())
      .def("system_one_json", &Model::system_one_json, py::arg("body"))
      .def("permute_json", &Model::permute_json, py::arg("body"))
      .def("separate_json", &Model::separate_json, py::arg("body"))
      .def("forward", &Model::forward, py::arg("rows"), py::arg("prefix") = py::none())
      .def("head", &Model::head, py::arg("hidden"))
      .def_property_readonly("hidden", &Model::hidden)
      .def_property_readonly("temperature", &Model::temperature);
}
