#include "kev/core/isa.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <fstream>
#include <set>
#include <sstream>
#include <string>
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
  std::set<std::string> f = cpuinfo_flags();
  if (f.empty()) GTEST_SKIP() << "no /proc/cpuinfo flags";
  EXPECT_TRUE(isa_supported(Isa::kPortable));
  EXPECT_EQ(isa_supported(Isa::kAvx2), f.count("avx2") && f.count("fma"));
  EXPECT_EQ(isa_supported(Isa::kAvx512), f.count("avx2") && f.count("fma") && f.count("avx512f") &&
                                             f.count("avx512bw") && f.count("avx512vl"));
}

TEST(Isa, SupportedListIsWhatTheCpuRunsLowestFirst) {
  std::vector<Isa> want = {Isa::kPortable};
  if (isa_supported(Isa::kAvx2)) want.push_back(Isa::kAvx2);
  if (isa_supported(Isa::kAvx512)) want.push_back(Isa::kAvx512);
  EXPECT_EQ(supported_isas(), want);
}

TEST(Isa, NamesRoundTrip) {
  for (Isa isa : {Isa::kPortable, Isa::kAvx2, Isa::kAvx512})
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
    ScopedEnv cap("KEV_ISA", "avx512");  // above this CPU's best on AVX2 machines: falls back
    EXPECT_EQ(dispatch_isa("KEV_TEST_FAMILY_ISA"), best_supported_isa());
  }
  {
    ScopedEnv cap("KEV_ISA", "portable");
    ScopedEnv family("KEV_TEST_FAMILY_ISA", "avx2");  // the family's own variable wins
    Isa want = isa_supported(Isa::kAvx2) ? Isa::kAvx2 : Isa::kPortable;
    EXPECT_EQ(dispatch_isa("KEV_TEST_FAMILY_ISA"), want);
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
