// The prefix-reuse contract (model.h, score/scorer.h): a state continued from a saved point is
// bitwise the state computed in one pass, and so are the hidden states of the continuation and
// of rows run on it. Checked in every precision mode with the recurrent GDN form from any point,
// and with the chunked form from multiples of its chunk (the only points the scorer uses there).
// The oracle is the one-pass computation of the same ids.
#include <gtest/gtest.h>

#include <cstring>
#include <string>
#include <vector>

#include "kev/core/error.h"
#include "kev/model/model.h"
#include "model/cpu_state.h"
#include "synth_model_test.h"

namespace kev {
namespace {

constexpr char kContinueDir[] = "kev-continue";

class Continue : public model_test::SynthModelTest<kContinueDir, 11> {
 protected:
  static std::vector<int32_t> slice(const std::vector<int32_t>& v, size_t a, size_t b) {
    return {v.begin() + static_cast<std::ptrdiff_t>(a), v.begin() + static_cast<std::ptrdiff_t>(b)};
  }
  static bool same_floats(const std::vector<float>& a, const std::vector<float>& b) {
    return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
  }
  // A layer's keys (or values) of every position, whatever their blocks.
  static std::vector<float> all_of(const LayerState& l, AlignedVector<float> KvBlock::*part) {
    std::vector<float> out;
    for (const auto& b : l.kv) out.insert(out.end(), ((*b).*part).begin(), ((*b).*part).end());
    return out;
  }
  // The CPU backend's states (cpu_state.h), compared buffer by buffer.
  static bool same_state(const PrefixState& a, const PrefixState& b) {
    const CpuState &sa = cpu_state(a), &sb = cpu_state(b);
    if (a.length != b.length || sa.layers.size() != sb.layers.size()) return false;
    for (size_t l = 0; l < sa.layers.size(); ++l) {
      const LayerState &x = sa.layers[l], &y = sb.layers[l];
      if (!same_floats(all_of(x, &KvBlock::k), all_of(y, &KvBlock::k)) ||
          !same_floats(all_of(x, &KvBlock::v), all_of(y, &KvBlock::v)) ||
          !same_floats(x.conv, y.conv) || !same_floats(x.s, y.s))
        return false;
    }
    return true;
  }

  // For each cut point: extend(empty, ids[:p]) then extend(that, ids[p:]) against one pass.
  static void check_points(const std::vector<size_t>& points, const char* what) {
    Model& m = *model_;
    const std::vector<int32_t> all = ids(300, 3);
    std::vector<float> one_hidden;
    const PrefixState one = m.extend(m.empty_state(), all, {}, &one_hidden);
    const size_t h = static_cast<size_t>(m.config().hidden);
    RowRequest row;
    row.ids = ids(13, 4);
    const std::vector<RowResult> one_rows = m.run_rows(one, {row});
    for (size_t p : points) {
      const PrefixState saved = m.extend(m.empty_state(), slice(all, 0, p));
      std::vector<float> tail_hidden;
      const PrefixState cont = m.extend(saved, slice(all, p, all.size()), {}, &tail_hidden);
      EXPECT_TRUE(same_state(cont, one)) << what << ": state continued from " << p;
      const std::vector<float> want(one_hidden.begin() + static_cast<std::ptrdiff_t>(p * h),
                                    one_hidden.end());
      EXPECT_TRUE(same_floats(tail_hidden, want)) << what << ": hidden continued from " << p;
      const std::vector<RowResult> rows = m.run_rows(cont, {row});
      EXPECT_TRUE(same_floats(rows[0].hidden, one_rows[0].hidden)) << what << ": row after " << p;
    }
    // Two saved points in a row (a conversation that grew twice).
    const PrefixState a = m.extend(m.empty_state(), slice(all, 0, points.front()));
    const PrefixState b = m.extend(a, slice(all, points.front(), points.back()));
    const PrefixState c = m.extend(b, slice(all, points.back(), all.size()));
    EXPECT_TRUE(same_state(c, one)) << what << ": continued twice";
  }
};

TEST_F(Continue, RecurrentFromAnyPointIsOnePassInEveryPrecision) {
  for (Precision p : {Precision::kFp32, Precision::kBf16, Precision::kInt8}) {
    model_->set_options({.gdn = GdnMode::kRecurrent, .threads = 2, .precision = p});
    check_points({1, 37, 64, 129, 250, 299}, precision_name(p));
  }
  model_->set_options({});
}

TEST_F(Continue, ChunkedFromChunkBoundariesIsOnePassInEveryPrecision) {
  for (Precision p : {Precision::kFp32, Precision::kBf16, Precision::kInt8}) {
    model_->set_options({.gdn = GdnMode::kChunked, .threads = 2, .precision = p});
    check_points({64, 128, 256}, precision_name(p));
  }
  model_->set_options({});
}

// extend_through (model.h): the states at its cuts, given as their passes end, are bitwise those
// of separate extend() calls from cut to cut, in every precision and both GDN forms (chunked
// from any cut too: its chunks start at every cut, as each separate call's do); cuts that share
// a pass (prefill_step 64 here: 10 + 10 + 10 tokens, then a 64-token step) and cuts that do not.
// The oracle is the chain of separate extend() calls.
TEST_F(Continue, ExtendThroughGivesTheStatesOfSeparateExtends) {
  Model& m = *model_;
  const std::vector<int32_t> all = ids(300, 8);
  const std::vector<std::vector<size_t>> cut_sets = {
      {10, 20, 30, 200, 300}, {92, 300}, {1, 299, 300}};
  for (GdnMode g : {GdnMode::kRecurrent, GdnMode::kChunked})
    for (Precision p : {Precision::kFp32, Precision::kBf16, Precision::kW8A8})
      for (size_t step : {size_t{64}, kPrefillStepTokens}) {
        if (p != Precision::kFp32 && step != 64) continue;  // the chained passes: step 64
        m.set_options({.gdn = g, .threads = 2, .precision = p, .prefill_step = step});
        for (const std::vector<size_t>& cuts : cut_sets) {
          const std::string what = std::string(precision_name(p)) +
                                   (g == GdnMode::kChunked ? " chunked" : " recurrent") + " step " +
                                   std::to_string(step) + " cuts " + std::to_string(cuts.size()) +
                                   " first " + std::to_string(cuts[0]);
          std::vector<PrefixState> got;
          std::vector<size_t> order;
          m.extend_through(m.empty_state(), all, cuts, [&](size_t c, const PrefixState& s) {
            order.push_back(c);
            got.push_back(s);
          });
          ASSERT_EQ(got.size(), cuts.size()) << what;
          PrefixState want = m.empty_state();
          size_t at = 0;
          for (size_t c = 0; c < cuts.size(); ++c) {
            want = m.extend(want, slice(all, at, cuts[c]));
            at = cuts[c];
            EXPECT_EQ(order[c], c) << what;
            EXPECT_TRUE(same_state(got[c], want)) << what << ": state at cut " << cuts[c];
          }
        }
      }
  m.set_options({});
}

// A state stopped between passes keeps the points given before, and nothing after; cuts that are
// not ascending inside (0, n] or do not end at n are refused.
TEST_F(Continue, ExtendThroughStopsBetweenPassesAndRefusesBadCuts) {
  Model& m = *model_;
  ForwardOptions small = m.options();
  small.prefill_step = static_cast<size_t>(kGdnChunkTokens);
  m.set_options(small);
  const std::vector<int32_t> all = ids(200, 9);
  std::vector<size_t> given;
  int asked = 0;
  try {
    // Passes (each part stepped from its own start): [0, 10) + [10, 40), then [40, 104),
    // [104, 120), [120, 184), [184, 200).
    m.extend_through(
        m.empty_state(), all, {10, 40, 120, 200},
        [&](size_t c, const PrefixState&) { given.push_back(c); }, [&] { return ++asked == 2; });
    ADD_FAILURE() << "extend_through did not stop";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kInterrupted) << e.what();
  }
  EXPECT_EQ(given, (std::vector<size_t>{0, 1}));
  EXPECT_EQ(asked, 2);
  auto nothing = [](size_t, const PrefixState&) { ADD_FAILURE() << "a state of bad cuts"; };
  for (const std::vector<size_t>& bad : std::vector<std::vector<size_t>>{
           {}, {0, 200}, {50, 50, 200}, {60, 50, 200}, {100}, {201}, {100, 201}}) {
    try {
      m.extend_through(m.empty_state(), all, bad, nothing);
      ADD_FAILURE() << "bad cuts accepted (" << bad.size() << " cuts)";
    } catch (const Error& e) {
      EXPECT_EQ(e.kind(), ErrorKind::kInternal) << e.what();
    }
  }
  m.set_options({});
}

// extend_through_rows (model.h): the rows' hidden states are run_rows' on the state at the end,
// bitwise, whether they join the state's last pass (short rows) or run after it (rows beyond one
// row pass); bad rows are refused before any state is given.
TEST_F(Continue, ExtendThroughRowsIsRunRowsOnTheEndState) {
  Model& m = *model_;
  const std::vector<int32_t> all = ids(120, 10);
  RowRequest a, b, long_row;
  a.ids = ids(13, 11);
  a.readout = {0, 12, 5};
  b.ids = ids(7, 12);
  long_row.ids = ids(kRowPassTokens - 100, 13);  // with the state's 120 tokens: beyond one pass
  long_row.readout = {0, static_cast<int64_t>(kRowPassTokens) - 101};
  for (auto [p, g] : {std::pair{Precision::kFp32, GdnMode::kRecurrent},
                      std::pair{Precision::kFp32, GdnMode::kChunked},
                      std::pair{Precision::kBf16, GdnMode::kRecurrent},
                      std::pair{Precision::kW8A8, GdnMode::kChunked}}) {
    m.set_options({.gdn = g, .threads = 2, .precision = p});
    const std::string what =
        std::string(precision_name(p)) + (g == GdnMode::kChunked ? " chunked" : " recurrent");
    const PrefixState end =
        m.extend(m.extend(m.empty_state(), slice(all, 0, 64)), slice(all, 64, all.size()));
    std::vector<std::vector<RowRequest>> cases = {{a, b}};
    if (p == Precision::kFp32 && g == GdnMode::kRecurrent) cases.push_back({a, long_row});
    for (const std::vector<RowRequest>& rows : cases) {
      std::vector<PrefixState> got;
      const std::vector<RowResult> fused = m.extend_through_rows(
          m.empty_state(), all, {64, all.size()},
          [&](size_t, const PrefixState& s) { got.push_back(s); }, rows);
      ASSERT_EQ(got.size(), 2u) << what;
      EXPECT_TRUE(same_state(got[1], end)) << what;
      const std::vector<RowResult> want = m.run_rows(end, rows);
      ASSERT_EQ(fused.size(), rows.size()) << what;
      for (size_t r = 0; r < rows.size(); ++r) {
        EXPECT_EQ(fused[r].rows, want[r].rows) << what << " row " << r;
        EXPECT_TRUE(same_floats(fused[r].hidden, want[r].hidden))
            << what << " row " << r << " of " << rows.size();
      }
    }
  }
  m.set_options({});
  // Rows that run after the state: `stop` is asked before them (the state's end given first).
  std::vector<size_t> given;
  try {
    m.extend_through_rows(
        m.empty_state(), all, {all.size()},
        [&](size_t c, const PrefixState&) { given.push_back(c); }, {a, long_row},
        [] { return true; });
    ADD_FAILURE() << "rows after the state ran without asking stop";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kInterrupted) << e.what();
  }
  EXPECT_EQ(given, std::vector<size_t>{0});
  RowRequest bad = a;
  bad.readout = {13};
  try {
    m.extend_through_rows(
        m.empty_state(), all, {all.size()},
        [](size_t, const PrefixState&) { ADD_FAILURE() << "a state given before the check"; },
        {a, bad});
    ADD_FAILURE() << "a readout outside its row was accepted";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kBadInput) << e.what();
  }
}

TEST_F(Continue, ContinuedStatesShareTheirPrefixBlocks) {
  Model& m = *model_;
  const PrefixState s10 = m.extend(m.empty_state(), ids(10, 5));
  const PrefixState s20 = m.extend(s10, ids(10, 6));
  const CpuState &c10 = cpu_state(s10), &c20 = cpu_state(s20);
  size_t attention = 0;
  for (size_t l = 0; l < c20.layers.size(); ++l) {
    if (c10.layers[l].kv.empty()) continue;
    ++attention;
    ASSERT_EQ(c20.layers[l].kv.size(), 2u);
    EXPECT_EQ(c20.layers[l].kv[0].get(), c10.layers[l].kv[0].get());  // shared, not copied
  }
  EXPECT_GT(attention, 0u);
  // Every buffer of s10 that s20 also lists is a shared block: the GDN buffers are its own.
  const std::vector<StateBuffer> a = state_buffers(s10), b = state_buffers(s20);
  size_t shared = 0;
  for (const StateBuffer& x : a)
    for (const StateBuffer& y : b)
      if (x.address == y.address) ++shared;
  EXPECT_EQ(shared, attention);
}

TEST_F(Continue, BytesHeldCountsEveryBuffer) {
  Model& m = *model_;
  const ModelConfig& c = m.config();
  const PrefixState s10 = m.extend(m.empty_state(), ids(10, 5));
  const PrefixState s20 = m.extend(s10, ids(10, 6));
  const PrefixState one20 = m.extend(m.empty_state(), ids(20, 7));
  // Independent count from the config: per attention layer k and v of kv_heads * head_dim
  // floats per token; per GDN layer (K-1) conv rows and the [lv, dk, dv] state.
  size_t attn = 0, gdn = 0;
  for (int64_t l = 0; l < c.layers; ++l) (is_full_attention_layer(l) ? attn : gdn) += 1;
  const size_t per_token = attn * 2 * static_cast<size_t>(c.kv_heads * c.head_dim) * 4;
  const size_t fixed =
      gdn *
      static_cast<size_t>((c.conv_kernel - 1) * c.conv_dim() +
                          c.linear_value_heads * c.linear_key_dim * c.linear_value_dim) *
      4;
  const size_t overhead = 4096 + 64 * static_cast<size_t>(c.layers);  // bookkeeping only
  EXPECT_GE(bytes_held(s10), fixed + 10 * per_token);
  EXPECT_LT(bytes_held(s10), fixed + 10 * per_token + overhead);
  EXPECT_GE(bytes_held(s20), fixed + 20 * per_token);
  EXPECT_LT(bytes_held(s20), fixed + 20 * per_token + 2 * overhead);
  EXPECT_GE(bytes_held(one20), fixed + 20 * per_token);
  EXPECT_LT(bytes_held(one20), fixed + 20 * per_token + overhead);
  // Memory admission's figures (Model::state_footprint) are that count, and exactly the data of
  // the buffers the states hold (allocated to their size).
  EXPECT_EQ(m.state_footprint().per_token, per_token);
  EXPECT_EQ(m.state_footprint().fixed, fixed);
  for (const PrefixState* s : {&s10, &s20, &one20}) {
    size_t data = 0;
    for (const LayerState& l : cpu_state(*s).layers) {
      for (const auto& b : l.kv) data += (b->k.capacity() + b->v.capacity()) * sizeof(float);
      data += (l.conv.capacity() + l.s.capacity()) * sizeof(float);
    }
    EXPECT_EQ(data, fixed + static_cast<size_t>(s->length) * per_token);
  }
}

// A long prefill asks `stop` before every step after the first (model.h): never for a prefix of
// one step, once per later step while it says go on, and the first true ends the call with
// kInterrupted after exactly that many steps.
// A small step (64 tokens, one GDN chunk) makes the same checks cheap under emulation; the
// default step (kPrefillStepTokens) runs the same loop.
TEST_F(Continue, ExtendAsksStopBetweenPrefillSteps) {
  Model& m = *model_;
  const ForwardOptions saved = m.options();
  ForwardOptions small = saved;
  small.prefill_step = static_cast<size_t>(kGdnChunkTokens);
  m.set_options(small);
  const size_t step = small.prefill_step;
  int asked = 0;
  auto count = [&] {
    ++asked;
    return false;
  };
  m.extend(m.empty_state(), ids(step, 5), {}, nullptr, count);
  EXPECT_EQ(asked, 0);
  const std::vector<int32_t> long_ids = ids(2 * step + 3, 6);
  const PrefixState stepped = m.extend(m.empty_state(), long_ids, {}, nullptr, count);
  EXPECT_EQ(asked, 2);
  EXPECT_EQ(stepped.length, static_cast<int64_t>(long_ids.size()));
  asked = 0;
  auto stop_second = [&] { return ++asked == 2; };
  try {
    m.extend(m.empty_state(), long_ids, {}, nullptr, stop_second);
    ADD_FAILURE() << "extend did not stop";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kInterrupted);
    EXPECT_NE(std::string(e.what()).find(std::to_string(2 * step)), std::string::npos) << e.what();
  }
  EXPECT_EQ(asked, 2);
  m.set_options(saved);
  // The step is where a prefix may stop, never what it computes.
  EXPECT_TRUE(same_state(stepped, m.extend(m.empty_state(), long_ids)));
  for (size_t bad : {size_t{0}, size_t{100}}) {
    ForwardOptions o = saved;
    o.prefill_step = bad;
    try {
      m.set_options(o);
      ADD_FAILURE() << "prefill step " << bad << " accepted";
    } catch (const Error& e) {
      EXPECT_EQ(e.kind(), ErrorKind::kBadInput);
    }
  }
  EXPECT_EQ(m.options().prefill_step, saved.prefill_step);
}

}  // namespace
}  // namespace kev
