// Upstream's date facts: expected strings printed by CPython 3 running upstream's rule
// (re + datetime.strptime, as in kev/api.py date_facts); the server-level comparison is in
// tests/integration/test_serve_compat.py.
#include <gtest/gtest.h>

#include <string>

#include "kev/text/date_facts.h"

namespace kev {
namespace {

TEST(DateFacts, MatchesPython) {
  EXPECT_EQ(date_facts("August 3, 2026 and July 22, 2026"),
            "July 22, 2026 is 12 days before August 3, 2026.");
  EXPECT_EQ(date_facts("2024-02-28, February 29, 2024, 2024-03-01, 2024-02-28"),
            "February 29, 2024 is 1 day after 2024-02-28. 2024-03-01 is 2 days after 2024-02-28. "
            "2024-03-01 is 1 day after February 29, 2024.");
  EXPECT_EQ(date_facts("2025-02-29 2026-01-01 2026-01-02"),
            "2026-01-02 is 1 day after 2026-01-01.");
  EXPECT_EQ(date_facts("0001-01-01 and 9999-12-31"),
            "9999-12-31 is 3652058 days after 0001-01-01.");
  EXPECT_EQ(date_facts("x2026-01-01 2026-01-01x 2026-05-05"), "");
  EXPECT_EQ(date_facts("\xd9\xa2\xd9\xa0\xd9\xa2\xd9\xa6-03-05 / 2026-03-04"),
            "2026-03-04 is 1 day before \xd9\xa2\xd9\xa0\xd9\xa2\xd9\xa6-03-05.");
  EXPECT_EQ(date_facts("no dates"), "");
}

TEST(DateFacts, AnnotationReplacedNotStacked) {
  OrderedJson obj =
      OrderedJson::parse(R"({"date_facts": "old", "a": "2026-01-01", "b": "2026-01-03"})");
  OrderedJson once = with_date_facts(obj);
  EXPECT_EQ(
      once.dump(),
      R"({"a":"2026-01-01","b":"2026-01-03","date_facts":"2026-01-03 is 2 days after 2026-01-01."})");
  EXPECT_EQ(with_date_facts(once), once);
  OrderedJson text = "2026-01-01 2026-01-02\n\ndate_facts: old";
  EXPECT_EQ(with_date_facts(text).get<std::string>(),
            "2026-01-01 2026-01-02\n\ndate_facts: 2026-01-02 is 1 day after 2026-01-01.");
  EXPECT_EQ(with_date_facts(OrderedJson(42)), OrderedJson(42));
  EXPECT_EQ(
      with_date_facts(OrderedJson::parse(R"(["one 2026-01-01", {"date_facts": "x"}])")).dump(),
      R"(["one 2026-01-01"])");
}

}  // namespace
}  // namespace kev
