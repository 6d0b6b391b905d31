// The command line of the C++ benchmarks that take "--name value" pairs (bench_attention,
// bench_gdn): walked pair by pair, integer values checked against their range, and the levels an
// --isa NAME picks. Every error goes to the benchmark's own usage function (prints why and the
// usage line, exits 2).
//
//   for (bench::ArgPairs a(argc, argv, usage); a.next();)
//     if (a.is("--reps")) o.reps = a.integer(1, 100); else a.unknown();
#pragma once
#include <cstdlib>
#include <string>

#include "kev/cpu/isa.h"

namespace kev::bench {

class ArgPairs {
 public:
  using Usage = void (*)(const char* why);  // must not return

  ArgPairs(int argc, char** argv, Usage usage) : argc_(argc), argv_(argv), usage_(usage) {}

  // Moves to the next pair; false past the last. A name without a value is an error.
  bool next() {
    i_ += 2;
    if (i_ >= argc_) return false;
    if (i_ + 1 >= argc_) fail("missing value after " + name());
    return true;
  }
  bool is(const char* name) const { return name == this->name(); }
  std::string name() const { return argv_[i_]; }
  const char* value() const { return argv_[i_ + 1]; }
  // The value as a whole decimal integer in [lo, hi].
  long long integer(long long lo, long long hi) const {
    char* end = nullptr;
    const long long v = std::strtoll(value(), &end, 10);
    if (end == value() || *end != '\0' || v < lo || v > hi) fail(name() + ": out of range");
    return v;
  }
  [[noreturn]] void unknown() const { fail("unknown option " + name()); }
  [[noreturn]] void fail(const std::string& why) const {
    usage_(why.c_str());
    std::abort();  // unreachable: usage exits
  }

 private:
  int argc_;
  char** argv_;
  Usage usage_;
  int i_ = -1;
};

// run(isa) for the level `name` names (an error unless this CPU runs it) or, with no name, for
// every level this CPU runs, lowest first.
template <class Run>
void for_levels(const std::string& name, ArgPairs::Usage usage, Run run) {
  if (name.empty()) {
    for (Isa isa : supported_isas()) run(isa);
    return;
  }
  const auto isa = parse_isa(name);
  if (!isa || !isa_supported(*isa)) {
    usage(("--isa: not a level this CPU runs: " + name).c_str());
    std::abort();  // unreachable: usage exits
  }
  run(*isa);
}

}  // namespace kev::bench
