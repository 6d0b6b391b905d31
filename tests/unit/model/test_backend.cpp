// The backend seam (src/model/backend.h): a second backend, registered from outside the model
// layer, carries whole forwards. It is the CPU layers over the portable kernel table (the
// reference order every level must match bit for bit), wrapped to count its passes; a Model made
// with it must give the same bits as the default "cpu" backend at this CPU's best level (the
// kernel families' contract: the level changes speed, never a bit), for prefills, continued
// states and rows, in fp32 and int8, and its passes must be the ones that ran. It keeps states
// of its own kind, which the CPU backend refuses (and it refuses the CPU's).
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "kev/core/error.h"
#include "kev/cpu/isa.h"
#include "kev/model/model.h"
#include "model/backend.h"
#include "synth_model_test.h"

namespace kev {
namespace {

constexpr char kBackendDir[] = "kev-backend";
constexpr char kPortableBackend[] = "test-portable-order";

std::atomic<int> g_portable_passes{0};

// The test backend's own kind of state: the CPU's inside a wrapper that only this backend
// unwraps, as a device backend's states would be its own (device memory, its layout).
struct WrappedState final : BackendState {
  explicit WrappedState(std::shared_ptr<const BackendState> s) : inner(std::move(s)) {}
  std::vector<StateBuffer> buffers() const override { return inner->buffers(); }
  size_t bookkeeping_bytes() const override {
    return sizeof(WrappedState) + inner->bookkeeping_bytes();
  }
  std::shared_ptr<const BackendState> inner;
};

PrefixState unwrap(const PrefixState& s) {
  return {s.length, static_cast<const WrappedState&>(*s.data).inner};
}

class CountingBackend final : public Backend {
 public:
  explicit CountingBackend(std::unique_ptr<Backend> inner) : inner_(std::move(inner)) {}
  const char* name() const override { return kPortableBackend; }
  void prepare(const ForwardOptions& o) override { inner_->prepare(o); }
  void run(const ForwardOptions& o, std::vector<Segment>& segs, std::vector<float>& out,
           std::vector<PrefixState>* states) const override {
    ++g_portable_passes;
    std::vector<PrefixState> inner_from;
    inner_from.reserve(segs.size());
    std::vector<const PrefixState*> from;
    for (Segment& s : segs) {
      from.push_back(s.from);
      if (s.continues >= 0) continue;  // the pass links it to its predecessor's state
      inner_from.push_back(unwrap(*s.from));
      s.from = &inner_from.back();
    }
    std::vector<PrefixState> inner_states;
    inner_->run(o, segs, out, states ? &inner_states : nullptr);
    for (size_t i = 0; i < segs.size(); ++i) segs[i].from = from[i];
    for (const PrefixState& s : inner_states)
      states->push_back({s.length, std::make_shared<const WrappedState>(s.data)});
  }
  std::shared_ptr<const BackendState> empty_state() const override {
    return std::make_shared<const WrappedState>(inner_->empty_state());
  }
  void check_state(const PrefixState& s) const override {
    if (dynamic_cast<const WrappedState*>(s.data.get()) == nullptr)
      fail(ErrorKind::kInternal, "not a {} state", kPortableBackend);
    inner_->check_state(unwrap(s));
  }
  StateFootprint state_footprint() const override { return inner_->state_footprint(); }

 private:
  std::unique_ptr<Backend> inner_;
};

bool same_floats(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

class BackendSeam : public model_test::SynthModelTest<kBackendDir, 17> {
 protected:
  static void SetUpTestSuite() {
    SynthModelTest::SetUpTestSuite();
    register_backend(kPortableBackend, [](const ModelWeights& w) {
      return std::make_unique<CountingBackend>(
          make_cpu_backend(w, ModelKernels::at_level(Isa::kPortable)));
    });
  }

  static std::unique_ptr<Model> load(const std::string& backend, Precision p) {
    ForwardOptions o;
    o.backend = backend;
    o.precision = p;
    o.prefill_step = 128;  // several passes per prefill
    return Model::load((dir_ / "base").string(), o);
  }
};

TEST_F(BackendSeam, RegistryListsBothAndRefusesUnknownNamesAndDuplicates) {
  const std::vector<std::string> names = backend_names();
  EXPECT_NE(std::find(names.begin(), names.end(), "cpu"), names.end());
  EXPECT_NE(std::find(names.begin(), names.end(), kPortableBackend), names.end());
  try {
    load("cuda-not-here", Precision::kFp32);
    FAIL() << "an unknown backend was accepted";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kBadInput);
    EXPECT_NE(std::string(e.what()).find("no backend 'cuda-not-here'"), std::string::npos)
        << e.what();
    EXPECT_NE(std::string(e.what()).find("cpu"), std::string::npos) << e.what();
  }
  EXPECT_THROW(
      register_backend("cpu",
                       [](const ModelWeights& w) { return make_cpu_backend(w, model_kernels()); }),
      Error);
}

TEST_F(BackendSeam, SecondBackendGivesTheDefaultBackendsBits) {
  const std::vector<int32_t> prefix = ids(300, 5), more = ids(70, 6);
  RowRequest row;
  row.ids = ids(9, 7);
  RowRequest read_two = row;
  read_two.readout = {0, 8};
  for (Precision p : {Precision::kFp32, Precision::kInt8}) {
    const std::unique_ptr<Model> cpu = load("cpu", p), other = load(kPortableBackend, p);
    const int before = g_portable_passes.load();
    std::vector<float> h_cpu, h_other, t_cpu, t_other;
    const PrefixState s_cpu = cpu->extend(cpu->empty_state(), prefix, {}, &h_cpu);
    const PrefixState s_other = other->extend(other->empty_state(), prefix, {}, &h_other);
    EXPECT_GE(g_portable_passes.load() - before, 3) << "300 tokens in steps of 128";
    EXPECT_TRUE(same_floats(h_cpu, h_other)) << precision_name(p) << ": prefill";
    const PrefixState c_cpu = cpu->extend(s_cpu, more, {}, &t_cpu);
    const PrefixState c_other = other->extend(s_other, more, {}, &t_other);
    EXPECT_TRUE(same_floats(t_cpu, t_other)) << precision_name(p) << ": continued state";
    const auto r_cpu = cpu->run_rows(c_cpu, {row, read_two});
    const int rows_before = g_portable_passes.load();
    const auto r_other = other->run_rows(c_other, {row, read_two});
    EXPECT_EQ(g_portable_passes.load() - rows_before, 1) << "two short rows: one pass";
    ASSERT_EQ(r_cpu.size(), 2u);
    ASSERT_EQ(r_other.size(), 2u);
    for (size_t r = 0; r < 2; ++r)
      EXPECT_TRUE(same_floats(r_cpu[r].hidden, r_other[r].hidden))
          << precision_name(p) << ": row " << r;
  }
}

// The points of a state share one pass when they fit one prefill step (the backend's chained
// segments, backend.h), with the bits of the default backend's separate passes.
TEST_F(BackendSeam, CutsInsideOneStepShareOnePass) {
  const std::vector<int32_t> prefix = ids(100, 11);
  const std::unique_ptr<Model> cpu = load("cpu", Precision::kFp32),
                               other = load(kPortableBackend, Precision::kFp32);
  std::vector<PrefixState> points;
  const int before = g_portable_passes.load();
  other->extend_through(other->empty_state(), prefix, {64, 92, 100},
                        [&](size_t, const PrefixState& s) { points.push_back(s); });
  EXPECT_EQ(g_portable_passes.load() - before, 1) << "three points of 100 tokens: one pass";
  ASSERT_EQ(points.size(), 3u);
  RowRequest row;
  row.ids = ids(9, 12);
  PrefixState want = cpu->empty_state();
  size_t at = 0;
  for (size_t c = 0; c < 3; ++c) {
    const size_t end = std::vector<size_t>{64, 92, 100}[c];
    want =
        cpu->extend(want, std::vector<int32_t>(prefix.begin() + static_cast<std::ptrdiff_t>(at),
                                               prefix.begin() + static_cast<std::ptrdiff_t>(end)));
    at = end;
    EXPECT_EQ(points[c].length, static_cast<int64_t>(end));
    EXPECT_TRUE(same_floats(cpu->run_rows(want, {row})[0].hidden,
                            other->run_rows(points[c], {row})[0].hidden))
        << "a row on the point at " << end;
  }
}

// Several short states with their rows share passes (extend_through_rows_together, model.h):
// one pass for three jobs, three when the middle one fills a row pass alone; each job's states and
// rows are bitwise the default backend's extend_through_rows of that job alone; a job beyond one
// pass is refused before anything runs.
TEST_F(BackendSeam, ShortStatesWithTheirRowsShareOnePass) {
  const std::unique_ptr<Model> cpu = load("cpu", Precision::kFp32),
                               other = load(kPortableBackend, Precision::kFp32);
  const std::vector<std::vector<int32_t>> states = {ids(90, 20), ids(40, 21), ids(120, 22)};
  const std::vector<std::vector<size_t>> cuts = {{64, 82, 90}, {40}, {100, 120}};
  std::vector<std::vector<RowRequest>> rows(3);
  for (size_t j = 0; j < 3; ++j)
    for (size_t r = 0; r <= j; ++r) {
      RowRequest row;
      row.ids = ids(5 + 3 * r, static_cast<unsigned>(30 + 3 * j + r));
      row.readout = {0, static_cast<int64_t>(row.ids.size()) - 1};
      rows[j].push_back(row);
    }
  // Job 2 continues a 30-token state (its positions and keys after those).
  const PrefixState empty = other->empty_state(), cpu_empty = cpu->empty_state();
  const PrefixState start = other->extend(empty, ids(30, 24));
  const PrefixState cpu_start = cpu->extend(cpu_empty, ids(30, 24));
  const PrefixState* from[3] = {&empty, &empty, &start};
  const PrefixState* cpu_from[3] = {&cpu_empty, &cpu_empty, &cpu_start};
  auto run = [&](size_t expected_passes, size_t long_rows) {
    if (long_rows > 0) rows[1][0].ids = ids(long_rows, 40);
    rows[1][0].readout = {0, static_cast<int64_t>(rows[1][0].ids.size()) - 1};
    std::vector<std::vector<PrefixState>> got(3);
    std::vector<Model::StateJob> jobs(3);
    for (size_t j = 0; j < 3; ++j)
      jobs[j] = {from[j],  &states[j],
                 cuts[j],  [&got, j](size_t, const PrefixState& s) { got[j].push_back(s); },
                 &rows[j], {}};
    const int before = g_portable_passes.load();
    other->extend_through_rows_together(jobs);
    EXPECT_EQ(g_portable_passes.load() - before, static_cast<int>(expected_passes));
    for (size_t j = 0; j < 3; ++j) {
      if (long_rows > 0 && j == 1) continue;  // its bits: checked at the short size
      std::vector<PrefixState> want_states;
      const std::vector<RowResult> want = cpu->extend_through_rows(
          *cpu_from[j], states[j], cuts[j],
          [&](size_t, const PrefixState& s) { want_states.push_back(s); }, rows[j]);
      ASSERT_EQ(got[j].size(), cuts[j].size()) << "job " << j;
      for (size_t c = 0; c < cuts[j].size(); ++c) {
        EXPECT_EQ(got[j][c].length, want_states[c].length);
        EXPECT_TRUE(same_floats(other->run_rows(got[j][c], {rows[j][0]})[0].hidden,
                                cpu->run_rows(want_states[c], {rows[j][0]})[0].hidden))
            << "job " << j << " point " << c;
      }
      ASSERT_EQ(jobs[j].results.size(), rows[j].size());
      for (size_t r = 0; r < rows[j].size(); ++r)
        EXPECT_TRUE(same_floats(jobs[j].results[r].hidden, want[r].hidden))
            << "job " << j << " row " << r;
    }
  };
  run(1, 0);
  run(3, 4000);  // job 1 with its rows: 4,048 tokens, a pass of its own between the others
  std::vector<Model::StateJob> too_long(1);
  const std::vector<int32_t> long_state = ids(129, 23);  // load(): prefill steps of 128
  too_long[0] = {&empty,   &long_state,
                 {129},    [](size_t, const PrefixState&) {
                   ADD_FAILURE() << "a state given"; },
                 &rows[0], {}};
  EXPECT_THROW(other->extend_through_rows_together(too_long), Error);
}

// A backend runs the kernel table it was made with, not the process's: the one place where a
// table changes bits is the bf16 mode with a BF16 dot-product kernel (precision_kernels.h), which
// the portable table lacks (it rounds activations and runs the FP32-accumulating GEMM). So on a
// CPU with that kernel the two backends' bf16 hidden states must differ, and only by the mode's
// rounding.
TEST_F(BackendSeam, BackendRunsTheKernelTableItWasGiven) {
  if (!model_kernels().has_bf16_dot()) GTEST_SKIP() << "no bf16 dot kernel at this level";
  const std::unique_ptr<Model> cpu = load("cpu", Precision::kBf16),
                               other = load(kPortableBackend, Precision::kBf16);
  std::vector<float> h_cpu, h_other;
  cpu->extend(cpu->empty_state(), ids(200, 10), {}, &h_cpu);
  other->extend(other->empty_state(), ids(200, 10), {}, &h_other);
  ASSERT_EQ(h_cpu.size(), h_other.size());
  EXPECT_FALSE(same_floats(h_cpu, h_other)) << "the portable table's bf16 path was not taken";
  double diff = 0, norm = 0;
  for (size_t i = 0; i < h_cpu.size(); ++i) {
    diff += (double(h_cpu[i]) - h_other[i]) * (double(h_cpu[i]) - h_other[i]);
    norm += double(h_other[i]) * h_other[i];
  }
  EXPECT_LT(std::sqrt(diff / norm), 0.05) << "beyond the bf16 mode's rounding";
}

// A state is read only by a backend of the kind that made it (model.h): a mix-up is an internal
// error, never a silent misread.
TEST_F(BackendSeam, EachBackendReadsOnlyItsOwnKindOfState) {
  const std::unique_ptr<Model> cpu = load("cpu", Precision::kFp32),
                               other = load(kPortableBackend, Precision::kFp32);
  const PrefixState s_cpu = cpu->extend(cpu->empty_state(), ids(20, 8));
  const PrefixState s_other = other->extend(other->empty_state(), ids(20, 8));
  RowRequest row;
  row.ids = ids(4, 9);
  const auto expect_internal = [](auto&& call, const char* what) {
    try {
      call();
      ADD_FAILURE() << what << ": a state of another backend was read";
    } catch (const Error& e) {
      EXPECT_EQ(e.kind(), ErrorKind::kInternal) << what << ": " << e.what();
    }
  };
  expect_internal([&] { cpu->run_rows(s_other, {row}); }, "cpu reading the test backend's");
  expect_internal([&] { cpu->extend(s_other, row.ids); }, "cpu extending the test backend's");
  expect_internal([&] { other->run_rows(s_cpu, {row}); }, "the test backend reading cpu's");
  expect_internal([&] { cpu->run_rows(PrefixState{}, {row}); }, "cpu reading an empty handle");
  // Same buffers, counted through either kind.
  const std::vector<StateBuffer> a = state_buffers(s_cpu), b = state_buffers(s_other);
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i) EXPECT_EQ(a[i].bytes, b[i].bytes) << "buffer " << i;
  EXPECT_GT(bytes_held(s_other), bytes_held(s_cpu));  // the wrapper's own bookkeeping
}

}  // namespace
}  // namespace kev
