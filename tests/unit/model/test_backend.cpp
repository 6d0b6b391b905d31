// The backend seam (src/model/backend.h): a second backend, registered from outside the model
// layer, carries whole forwards. It is the CPU layers over the portable kernel table (the
// reference order every level must match bit for bit), wrapped to count its passes; a Model made
// with it must give the same bits as the default "cpu" backend at this CPU's best level (the
// kernel families' contract: the level changes speed, never a bit), for prefills, continued
// states and rows, in fp32 and int8, and its passes must be the ones that ran.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
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

class CountingBackend final : public Backend {
 public:
  explicit CountingBackend(std::unique_ptr<Backend> inner) : inner_(std::move(inner)) {}
  const char* name() const override { return kPortableBackend; }
  void prepare(const ForwardOptions& o) override { inner_->prepare(o); }
  void run(const ForwardOptions& o, std::vector<Segment>& segs, std::vector<float>& out,
           PrefixState* state_out) const override {
    ++g_portable_passes;
    inner_->run(o, segs, out, state_out);
  }

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

}  // namespace
}  // namespace kev
