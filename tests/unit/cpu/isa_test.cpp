#include "kev/cpu/isa.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <fstream>
#include <optional>
#include <set>
#include <sstream>
#include <string>
#include <string_view>
#include <vector>

#include "kev/core/error.h"
#include "kev/cpu/peak_probe.h"

namespace kev {
namespace {

// The CPU's flags as the kernel reports them (an independent view of CPUID).
std::set<std::string> cpuinfo_flags() {
  std::ifstream in("/proc/cpuinfo");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("flags", 0) != 0) continue;
    std::istringstream words(line.substr(line.find(':') + 1));
    std::set<std::string> out;
    for (std::string w; words >> w;) out.insert(w);
    return out;
  }
  return {};
}

// This build's level of that name (the test fails if there is none).
Isa level(const char* name) {
  std::optional<Isa> isa = parse_isa(name);
  EXPECT_TRUE(isa.has_value()) << name << " is not a level of this " << arch_name() << " build";
  return isa.value_or(Isa::kPortable);
}

std::vector<std::string> level_names() {
  std::vector<std::string> out;
  for (Isa isa : arch_isas()) out.emplace_back(isa_name(isa));
  return out;
}

// Sets environment variables for one test and restores them after.
class ScopedEnv {
 public:
  ScopedEnv(const char* name, const char* value) : name_(name) {
    if (const char* old = std::getenv(name)) old_ = old, had_ = true;
    setenv(name, value, 1);
  }
  ~ScopedEnv() { had_ ? setenv(name_, old_.c_str(), 1) : unsetenv(name_); }

 private:
  const char* name_;
  std::string old_;
  bool had_ = false;
};

TEST(Isa, SupportAgreesWithProcCpuinfo) {
  if (std::string(arch_name()) != "x86-64") GTEST_SKIP() << "x86-64 flags";
  std::set<std::string> f = cpuinfo_flags();
  if (f.empty()) GTEST_SKIP() << "no /proc/cpuinfo flags";
  EXPECT_TRUE(isa_supported(Isa::kPortable));
  EXPECT_EQ(isa_supported(level("avx2")), f.count("avx2") && f.count("fma"));
  EXPECT_EQ(isa_supported(level("avx512")), f.count("avx2") && f.count("fma") &&
                                                f.count("avx512f") && f.count("avx512bw") &&
                                                f.count("avx512vl"));
}

// Each architecture has its own levels, registered by its family folder by name and rank; the
// other architectures' levels do not exist here.
TEST(Isa, LevelsArePerArchitecture) {
  // By the family folder the build chose (KEV_CPU_FAMILY=generic builds "other" on any host).
  const std::string_view family = arch_name();
  using Names = std::vector<std::string>;
  // Every registered name reads back as its level, and no two levels share a name.
  for (Isa isa : arch_isas()) EXPECT_EQ(parse_isa(isa_name(isa)), isa) << isa_name(isa);
  const Names names = level_names();
  EXPECT_EQ(std::set<std::string>(names.begin(), names.end()).size(), names.size());
  EXPECT_EQ(arch_isas().front(), Isa::kPortable);
  EXPECT_EQ(parse_isa("scalar"), Isa::kPortable);
  if (family == "x86-64") {
    EXPECT_EQ(level_names(), (Names{"portable", "avx2", "avx512"}));
    EXPECT_FALSE(parse_isa("neon").has_value());
  } else if (family == "aarch64") {
    EXPECT_EQ(level_names(), (Names{"portable", "neon"}));
    EXPECT_TRUE(isa_supported(level("neon")));  // Advanced SIMD is part of the AArch64 Linux ABI
    EXPECT_FALSE(parse_isa("avx2").has_value());
    EXPECT_FALSE(parse_isa("avx512").has_value());
  } else {
    // "other" (src/cpu/generic/: portable only) or a family folder given to the build
    // (tests/cpu_family/demo/: portable and demo); either way none of the folders above.
    if (family == "other") {
      EXPECT_EQ(level_names(), (Names{"portable"}));
    } else if (family == "demo") {
      EXPECT_EQ(level_names(), (Names{"portable", "demo"}));
    }
    EXPECT_FALSE(parse_isa("avx2").has_value());
    EXPECT_FALSE(parse_isa("neon").has_value());
  }
  // A rank past the last level is no level: not run, not named.
  const Isa past = Isa::of_rank(static_cast<int>(arch_isas().size()));
  EXPECT_FALSE(isa_supported(past));
  EXPECT_STREQ(isa_name(past), "?");
}

TEST(Isa, SupportedListIsWhatTheCpuRunsLowestFirst) {
  std::vector<Isa> want;
  for (Isa isa : arch_isas())
    if (isa_supported(isa)) want.push_back(isa);
  EXPECT_EQ(want.front(), Isa::kPortable);
  EXPECT_EQ(supported_isas(), want);
  EXPECT_EQ(best_supported_isa(), want.back());
}

TEST(Isa, NamesRoundTrip) {
  for (Isa isa : arch_isas()) EXPECT_EQ(parse_isa(isa_name(isa)), isa);
  EXPECT_EQ(parse_isa("scalar"), Isa::kPortable);
  EXPECT_FALSE(parse_isa("AVX2").has_value());
  EXPECT_FALSE(parse_isa("").has_value());
}

TEST(Isa, EnvironmentCapsButNeverExceedsTheCpu) {
  ScopedEnv clear_family("KEV_TEST_FAMILY_ISA", "");
  {
    ScopedEnv cap("KEV_ISA", "portable");
    EXPECT_EQ(dispatch_isa("KEV_TEST_FAMILY_ISA"), Isa::kPortable);
  }
  {
    // this architecture's top level: above this CPU's best on smaller CPUs, falls back
    ScopedEnv cap("KEV_ISA", isa_name(arch_isas().back()));
    EXPECT_EQ(dispatch_isa("KEV_TEST_FAMILY_ISA"), best_supported_isa());
  }
  {
    ScopedEnv cap("KEV_ISA", "portable");
    // the family's own variable wins: this architecture's second level
    const Isa second = arch_isas().size() > 1 ? arch_isas()[1] : Isa::kPortable;
    ScopedEnv family("KEV_TEST_FAMILY_ISA", isa_name(second));
    Isa want = isa_supported(second) ? second : Isa::kPortable;
    EXPECT_EQ(dispatch_isa("KEV_TEST_FAMILY_ISA"), want);
  }
}

TEST(Isa, LevelsOfAnotherArchitectureAreRefused) {
  const bool aarch64 = std::string_view(arch_name()) == "aarch64";
  ScopedEnv bad("KEV_GEMM_ISA", aarch64 ? "avx2" : "neon");
  const std::string want = aarch64 ? "KEV_GEMM_ISA=avx2: not a level of this aarch64 build"
                                   : "KEV_GEMM_ISA=neon: not a level of this";
  try {
    check_isa_environment();
    FAIL() << "accepted another architecture's level";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kBadInput);
    EXPECT_NE(std::string(e.what()).find(want), std::string::npos) << e.what();
  }
}

TEST(Isa, UnknownValuesAreRefusedByName) {
  ScopedEnv bad("KEV_MERGE_ISA", "avx9");
  try {
    check_isa_environment();
    FAIL() << "accepted KEV_MERGE_ISA=avx9";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kBadInput);
    EXPECT_NE(std::string(e.what()).find("KEV_MERGE_ISA=avx9"), std::string::npos) << e.what();
  }
}

// The benchmarks' probes of the fast modes' product instructions: each is offered exactly where
// the CPU runs its instruction (x86-64: as /proc/cpuinfo names the extension), and an offered
// probe runs (no SIGILL) and counts 2 operations per product of its chains: 12 chains of
// lanes x products per lane on the vector probes, 4 tile products of 16 x 16 x depth on AMX.
TEST(PeakProbe, OfferedWhereTheInstructionRunsAndCountsItsProducts) {
  struct Probe {
    DotProbe probe;
    const char* flag;     // the x86-64 cpuinfo flag, or nullptr
    double ops_per_iter;  // 2 x the products of one iteration
  };
  const Probe probes[] = {
      {DotProbe::kBf16Pairs, "avx512_bf16", 2.0 * 12 * 16 * 2},
      {DotProbe::kInt16Pairs, "avx512_vnni", 2.0 * 12 * 16 * 2},
      {DotProbe::kInt8Quads, "avx512_vnni", 2.0 * 12 * 16 * 4},
      {DotProbe::kInt8QuadsYmm, "avx_vnni", 2.0 * 12 * 8 * 4},
      {DotProbe::kInt8Sdot, nullptr, 2.0 * 12 * 4 * 4},
      {DotProbe::kAmxBf16, nullptr, 2.0 * 4 * 16 * 16 * 32},
      {DotProbe::kAmxInt8, nullptr, 2.0 * 4 * 16 * 16 * 64},
  };
  const bool x86 = std::string(arch_name()) == "x86-64";
  const std::set<std::string> f = x86 ? cpuinfo_flags() : std::set<std::string>{};
  for (const Probe& p : probes) {
    SCOPED_TRACE(dot_probe_name(p.probe));
    if (x86 && p.flag && !f.empty()) {
      EXPECT_EQ(has_dot_peak_probe(p.probe), f.count(p.flag) == 1);
    }
    if (x86 && p.probe == DotProbe::kInt8Sdot) {
      EXPECT_FALSE(has_dot_peak_probe(p.probe));
    }
    if (!has_dot_peak_probe(p.probe)) {
      EXPECT_EQ(run_dot_peak_probe(p.probe, 3), 0.0);
      continue;
    }
    EXPECT_EQ(run_dot_peak_probe(p.probe, 3), 3 * p.ops_per_iter);
  }
}

}  // namespace
}  // namespace kev
