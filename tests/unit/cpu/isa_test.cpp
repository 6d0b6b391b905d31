#include "kev/cpu/isa.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <fstream>
#include <set>
#include <sstream>
#include <string>
#include <string_view>
#include <vector>

#include "kev/core/error.h"

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
  EXPECT_EQ(isa_supported(Isa::kAvx2), f.count("avx2") && f.count("fma"));
  EXPECT_EQ(isa_supported(Isa::kAvx512), f.count("avx2") && f.count("fma") && f.count("avx512f") &&
                                             f.count("avx512bw") && f.count("avx512vl"));
}

// Each architecture has its own levels; the other architectures' levels never run here.
TEST(Isa, LevelsArePerArchitecture) {
  // By the family folder the build chose (KEV_CPU_FAMILY=generic builds "other" on any host).
  const std::vector<Isa> levels(arch_isas().begin(), arch_isas().end());
  const std::string_view family = arch_name();
  if (family == "x86-64") {
    EXPECT_EQ(levels, (std::vector<Isa>{Isa::kPortable, Isa::kAvx2, Isa::kAvx512}));
    EXPECT_FALSE(isa_supported(Isa::kNeon));
  } else if (family == "aarch64") {
    EXPECT_EQ(levels, (std::vector<Isa>{Isa::kPortable, Isa::kNeon}));
    EXPECT_TRUE(isa_supported(Isa::kNeon));  // Advanced SIMD is part of the AArch64 Linux ABI
    EXPECT_FALSE(isa_supported(Isa::kAvx2));
    EXPECT_FALSE(isa_supported(Isa::kAvx512));
  } else {
    EXPECT_EQ(family, "other");
    EXPECT_EQ(levels, (std::vector<Isa>{Isa::kPortable}));
    EXPECT_FALSE(isa_supported(Isa::kAvx2));
    EXPECT_FALSE(isa_supported(Isa::kAvx512));
    EXPECT_FALSE(isa_supported(Isa::kNeon));
  }
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
  for (Isa isa : {Isa::kPortable, Isa::kAvx2, Isa::kAvx512, Isa::kNeon})
    EXPECT_EQ(parse_isa(isa_name(isa)), isa);
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

}  // namespace
}  // namespace kev
