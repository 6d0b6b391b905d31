// kev bench's run (kev/acceptance/bench_run.h) over a target that answers in process: the plan's
// bounds refused before any send, the passes and their sizes, the results file's lines and the
// summaries, against counts computed here from the documented rule.
#include <gtest/gtest.h>
#include <unistd.h>

#include <atomic>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "kev/acceptance/bench_run.h"
#include "kev/core/error.h"

namespace kev {
namespace {

// Answers 200 with usage.input_tokens = 10, or 503 for the body "busy"; counts every send.
class AnsweringTarget : public BenchTarget {
 public:
  void prepare(size_t) override {}
  BenchReply send(size_t, const std::string& body) override {
    sends.fetch_add(1);
    BenchReply r;
    r.outcome.status = body == "busy" ? 503 : 200;
    r.body = body == "busy" ? R"({"detail": "busy"})" : R"({"usage": {"input_tokens": 10}})";
    return r;
  }
  std::atomic<int> sends{0};
};

std::string fmt_id(size_t i) {
  std::string id = "r";
  id.append(std::to_string(i));
  return id;
}

class BenchRunTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string name = "kev-bench-run-test-";
    name.append(std::to_string(::getpid()));
    dir_ = (std::filesystem::temp_directory_path() / name).string();
    std::filesystem::create_directories(dir_);
    requests_path_ = dir_ + "/requests.jsonl";
    std::ofstream(requests_path_) << "{}\n";  // hashed into the metadata
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }

  BenchRun run_of(std::vector<std::string> bodies) {
    BenchRun run;
    run.requests_path = requests_path_;
    for (size_t i = 0; i < bodies.size(); ++i) run.requests.push_back({fmt_id(i), bodies[i]});
    return run;
  }

  std::string dir_, requests_path_;
};

ErrorKind refusal(BenchTarget& target, const BenchRun& run) {
  try {
    run_bench(target, run);
  } catch (const Error& e) {
    return e.kind();
  }
  return ErrorKind::kInternal;  // ran
}

TEST_F(BenchRunTest, APlanBeyondTheBoundsIsRefusedBeforeAnySend) {
  AnsweringTarget target;
  BenchRun run = run_of({"a", "b"});
  run.out = dir_ + "/out.jsonl";
  for (std::vector<size_t> levels : {std::vector<size_t>{}, std::vector<size_t>{0},
                                     std::vector<size_t>{kMaxBenchConcurrency + 1},
                                     std::vector<size_t>(kMaxBenchLevels + 1, 1)}) {
    run.plan.concurrency = levels;
    EXPECT_EQ(refusal(target, run), ErrorKind::kBadInput) << levels.size();
  }
  run.plan.concurrency = {1};
  run.plan.rounds = kMaxBenchPassRequests / 2 + 1;  // 2 requests x rounds > a pass's bound
  EXPECT_EQ(refusal(target, run), ErrorKind::kBadInput);
  // 11 levels of a 1,000,000-request pass: each within a pass's bound, the run beyond its own.
  run.plan.rounds = kMaxBenchPassRequests / 2;
  run.plan.concurrency = std::vector<size_t>(11, 1);
  EXPECT_EQ(refusal(target, run), ErrorKind::kBadInput);
  EXPECT_EQ(target.sends.load(), 0);
  EXPECT_FALSE(std::ifstream(run.out).good()) << "the results file is opened after the checks";
}

TEST_F(BenchRunTest, PassesHaveTheDocumentedSizesAndTheFileEveryResponse) {
  AnsweringTarget target;
  BenchRun run = run_of({"a", "busy", "c"});
  run.plan = {{1, 4}, 5, 2};  // levels 1 and 4, 5 warm-ups, 2 rounds
  run.out = dir_ + "/out.jsonl";
  run.svg = dir_ + "/latency.svg";
  run.metadata = {{"target", {{"bundle", "b"}}}};
  const std::vector<LevelSummary> levels = run_bench(target, run);
  // Warm-ups 5, feasibility 3, then max(3 x 2, 2 x c) per level: 6 at c=1, 8 at c=4.
  EXPECT_EQ(target.sends.load(), 5 + 3 + 6 + 8);
  ASSERT_EQ(levels.size(), 3u);
  EXPECT_EQ(levels[0].phase, "feasibility");
  EXPECT_EQ(levels[0].requests, 3u);
  EXPECT_EQ(levels[0].ok, 2u);
  EXPECT_EQ(levels[1].requests, 6u);
  EXPECT_EQ(levels[1].concurrency, 1u);
  EXPECT_EQ(levels[2].requests, 8u);
  EXPECT_EQ(levels[2].concurrency, 4u);
  EXPECT_EQ(levels[2].errors.at(503), 3u);  // of i % 3 for i < 8, i = 1, 4, 7 are "busy"
  for (const LevelSummary& s : levels) EXPECT_FALSE(s.ranked);  // a 503 in every pass

  std::ifstream in(run.out);
  std::vector<nlohmann::json> lines;
  for (std::string line; std::getline(in, line);) lines.push_back(nlohmann::json::parse(line));
  ASSERT_EQ(lines.size(), 1u + 3 + 6 + 8 + 1);  // metadata, responses, summary
  const nlohmann::json& meta = lines.front().at("kev_bench");
  EXPECT_EQ(meta.at("requests"), 3);
  EXPECT_EQ(meta.at("warmup"), 5);
  EXPECT_EQ(meta.at("target").at("bundle"), "b");
  EXPECT_EQ(meta.at("requests_sha256").get<std::string>().size(), 64u);
  EXPECT_EQ(lines[1].at("phase"), "feasibility");
  EXPECT_EQ(lines[2].at("id"), "r1");
  EXPECT_EQ(lines[2].at("status"), 503);
  EXPECT_EQ(lines[2].at("response").at("detail"), "busy");
  EXPECT_EQ(lines[4].at("phase"), "c1");
  EXPECT_EQ(lines[10].at("phase"), "c4");
  EXPECT_EQ(lines.back().at("kev_bench_summary").at("levels").size(), 3u);
  std::ifstream svg(run.svg);
  std::string head(5, '\0');
  svg.read(head.data(), 5);
  EXPECT_EQ(head, "<svg ");
}

TEST_F(BenchRunTest, AnUnwritableResultsFileIsAnIoErrorBeforeAnySend) {
  AnsweringTarget target;
  BenchRun run = run_of({"a"});
  run.plan.concurrency = {1};
  run.out = dir_ + "/missing/out.jsonl";
  EXPECT_EQ(refusal(target, run), ErrorKind::kIo);
  EXPECT_EQ(target.sends.load(), 0);
}

}  // namespace
}  // namespace kev
