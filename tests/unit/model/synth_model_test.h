// A fixture base for the model unit tests that run a whole synthetic model (test_run_rows,
// test_continue): one `kev synth` tiny checkpoint per suite, written to a temporary directory
// named after the suite and the process, loaded once, removed after the suite; `ids` draws
// token ids from a seeded generator so a failure reproduces.
#pragma once
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdint>
#include <filesystem>
#include <random>
#include <string>
#include <vector>

#include "kev/model/model.h"
#include "kev/synth/synth.h"

namespace kev::model_test {

// Name and Seed: the suite's temporary-directory name and synthesis seed.
template <const char* Name, uint64_t Seed>
class SynthModelTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = std::filesystem::temp_directory_path() /
           (std::string(Name) + "-" + std::to_string(::getpid()));
    std::filesystem::remove_all(dir_);
    SynthOptions o;
    o.out = dir_.string();
    o.seed = Seed;
    synthesize(o);
    model_ = Model::load((dir_ / "base").string()).release();
  }
  static void TearDownTestSuite() {
    delete model_;
    model_ = nullptr;
    std::filesystem::remove_all(dir_);
  }

  static std::vector<int32_t> ids(size_t n, unsigned seed) {
    std::mt19937 rng(seed);
    std::uniform_int_distribution<int32_t> d(0, static_cast<int32_t>(model_->config().vocab - 1));
    std::vector<int32_t> out(n);
    for (auto& v : out) v = d(rng);
    return out;
  }

  static inline std::filesystem::path dir_;
  static inline Model* model_ = nullptr;
};

}  // namespace kev::model_test
