// Model::run_rows over rows of different prefixes (the server's cross-request batching): every
// row's hidden states are bitwise those of the row run alone on its own prefix, whatever the
// mix of prefixes, row lengths and readouts in the pass, and whatever the thread count. The CI
// re-runs this (label unit) under each forced KEV_ISA.
#include <gtest/gtest.h>

#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "kev/core/error.h"
#include "kev/model/model.h"
#include "model/layers.h"  // kMaxPosition
#include "synth_model_test.h"

namespace kev {
namespace {

constexpr char kRunRowsDir[] = "kev-run-rows";

class RunRows : public model_test::SynthModelTest<kRunRowsDir, 5> {
 protected:
  static bool same(const RowResult& a, const RowResult& b) {
    return a.rows == b.rows && a.hidden.size() == b.hidden.size() &&
           std::memcmp(a.hidden.data(), b.hidden.data(), a.hidden.size() * sizeof(float)) == 0;
  }
};

TEST_F(RunRows, MixedPrefixesInOnePassEqualEachRowAlone) {
  Model& m = *model_;
  // Prefixes of different lengths (attention caches of different sizes, GDN states), one empty.
  std::vector<PrefixState> prefixes;
  prefixes.push_back(m.extend(m.empty_state(), ids(37, 1)));
  prefixes.push_back(m.extend(m.empty_state(), ids(5, 2)));
  prefixes.push_back(m.extend(prefixes[0], ids(11, 3)));  // a longer state continuing the first
  prefixes.push_back(m.empty_state());

  // Rows of various lengths and readouts, interleaved over the prefixes (also repeating one).
  std::vector<const PrefixState*> of;
  std::vector<RowRequest> rows;
  const size_t pick[] = {0, 1, 1, 2, 3, 0, 2, 1, 3, 0};
  for (size_t r = 0; r < std::size(pick); ++r) {
    RowRequest row;
    row.ids = ids(1 + (r * 7) % 23, 100 + static_cast<unsigned>(r));
    if (r % 3 == 1) row.readout = {0, static_cast<int64_t>(row.ids.size()) - 1};
    of.push_back(&prefixes[pick[r]]);
    rows.push_back(std::move(row));
  }

  for (size_t threads : {size_t{1}, size_t{2}, size_t{3}}) {
    m.set_options({.gdn = GdnMode::kRecurrent, .threads = threads});
    std::vector<RowResult> mixed = m.run_rows(of, rows);
    ASSERT_EQ(mixed.size(), rows.size());
    for (size_t r = 0; r < rows.size(); ++r) {
      std::vector<RowResult> alone = m.run_rows(*of[r], {rows[r]});
      EXPECT_TRUE(same(mixed[r], alone[0])) << "row " << r << ", threads " << threads;
    }
    // The one-prefix overload is the same pass with every row on that prefix.
    std::vector<RowRequest> first_rows;
    for (size_t r = 0; r < rows.size(); ++r)
      if (pick[r] == 0) first_rows.push_back(rows[r]);
    std::vector<RowResult> shared = m.run_rows(prefixes[0], first_rows);
    for (size_t r = 0, k = 0; r < rows.size(); ++r) {
      if (pick[r] == 0) {
        EXPECT_TRUE(same(shared[k], mixed[r])) << "row " << r;
        ++k;
      }
    }
  }
  m.set_options({});
}

TEST_F(RunRows, PrefixThenRowEqualsOneSequence) {
  // The prefix contract the mixed pass relies on: a row continuing a state == that sequence.
  Model& m = *model_;
  std::vector<int32_t> a = ids(19, 7), b = ids(9, 8);
  PrefixState s = m.extend(m.empty_state(), a);
  RowRequest row;
  row.ids = b;
  std::vector<RowResult> got = m.run_rows(std::vector<const PrefixState*>{&s}, {row});
  std::vector<int32_t> whole = a;
  whole.insert(whole.end(), b.begin(), b.end());
  std::vector<float> hidden;
  m.extend(m.empty_state(), whole, {}, &hidden);
  const size_t h = static_cast<size_t>(m.config().hidden);
  ASSERT_EQ(got[0].hidden.size(), b.size() * h);
  EXPECT_EQ(std::memcmp(got[0].hidden.data(), hidden.data() + a.size() * h,
                        got[0].hidden.size() * sizeof(float)),
            0);
}

// The last layer computes only what is read (layers.h): a row's readout (any order, repeats
// allowed) gives bitwise the hidden states at those indices of the same row read whole, beside
// rows read whole in the same pass, in every precision; and a prefill that reads nothing
// (extend without hidden) leaves bitwise the state of one that reads every row.
TEST_F(RunRows, ReadoutRowsEqualTheSameRowsReadWhole) {
  Model& m = *model_;
  const size_t h = static_cast<size_t>(m.config().hidden);
  for (Precision p : {Precision::kFp32, Precision::kBf16, Precision::kInt8}) {
    m.set_options({.gdn = GdnMode::kRecurrent, .threads = 2, .precision = p});
    std::vector<float> ignored;
    const PrefixState read_none = m.extend(m.empty_state(), ids(29, 21));
    const PrefixState read_all = m.extend(m.empty_state(), ids(29, 21), {}, &ignored);
    std::vector<RowRequest> rows(4);
    for (size_t r = 0; r < rows.size(); ++r)
      rows[r].ids = ids(9 + 4 * r, 30 + static_cast<unsigned>(r));
    rows[0].readout = {static_cast<int64_t>(rows[0].ids.size()) - 1};
    rows[1].readout = {5, 0, 5, 2};
    rows[3].readout = {3};  // rows[2] is read whole
    const std::vector<RowResult> trimmed = m.run_rows(read_none, rows);
    std::vector<RowRequest> whole = rows;
    for (RowRequest& r : whole) r.readout.clear();
    const std::vector<RowResult> full = m.run_rows(read_all, whole);
    for (size_t r = 0; r < rows.size(); ++r) {
      std::vector<int64_t> want_rows = rows[r].readout;
      if (want_rows.empty())
        for (size_t i = 0; i < rows[r].ids.size(); ++i)
          want_rows.push_back(static_cast<int64_t>(i));
      std::vector<float> want;
      for (int64_t i : want_rows)
        want.insert(want.end(), full[r].hidden.begin() + i * static_cast<int64_t>(h),
                    full[r].hidden.begin() + (i + 1) * static_cast<int64_t>(h));
      ASSERT_EQ(trimmed[r].rows, static_cast<int64_t>(want_rows.size()));
      ASSERT_EQ(trimmed[r].hidden.size(), want.size());
      EXPECT_EQ(std::memcmp(trimmed[r].hidden.data(), want.data(), want.size() * sizeof(float)), 0)
          << "row " << r << ", " << precision_name(p);
    }
  }
  m.set_options({});
}

TEST_F(RunRows, RefusesMismatchedPrefixes) {
  Model& m = *model_;
  RowRequest row;
  row.ids = ids(3, 9);
  EXPECT_THROW(m.run_rows(std::vector<const PrefixState*>{}, {row}), Error);
  EXPECT_THROW(m.run_rows(std::vector<const PrefixState*>{nullptr}, {row}), Error);
}

// Implicit positions (the prefix's length + i) stop at kMaxPosition as explicit ones do, with
// the same refusal, checked before any layer runs. A state of 2^20 tokens is too big for a unit
// test: the prefix here is an empty state claiming that length, refused before it is read.
TEST_F(RunRows, RefusesImplicitPositionsBeyondTheLimit) {
  Model& m = *model_;
  auto expect_refused = [](auto run, const std::string& needle) {
    try {
      run();
      ADD_FAILURE() << "accepted; expected refusal mentioning " << needle;
    } catch (const Error& e) {
      EXPECT_EQ(e.kind(), ErrorKind::kBadInput) << e.what();
      EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
    }
  };
  const std::string limit = "outside [0, " + std::to_string(kMaxPosition) + "]";
  PrefixState full = m.empty_state();
  full.length = kMaxPosition;
  RowRequest row;
  row.ids = ids(3, 9);  // implicit positions kMaxPosition (allowed), kMaxPosition + 1, + 2
  expect_refused([&] { m.run_rows(full, {row}); },
                 "row 0: position " + std::to_string(kMaxPosition + 1) + " at index 1 is " + limit);
  expect_refused(
      [&] { m.extend(full, row.ids, {}, nullptr); },
      "prefix: position " + std::to_string(kMaxPosition + 1) + " at index 1 is " + limit);
  full.length = kMaxPosition + 5;  // already beyond: the first token is refused
  expect_refused([&] { m.run_rows(full, {row}); },
                 "position " + std::to_string(kMaxPosition + 5) + " at index 0 is " + limit);
  // Explicit positions are checked as given, whatever the prefix's length.
  row.positions = {0, kMaxPosition, kMaxPosition + 1};
  full.length = 0;
  expect_refused([&] { m.run_rows(full, {row}); },
                 "position " + std::to_string(kMaxPosition + 1) + " at index 2 is " + limit);
}

}  // namespace
}  // namespace kev
