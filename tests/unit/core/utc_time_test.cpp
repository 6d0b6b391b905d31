// utc_date / utc_timestamp against Python's datetime (datetime.fromtimestamp(t, timezone.utc)),
// for the epoch, a leap day, the last second of 2099 and a date of this decade.
#include <gtest/gtest.h>

#include <chrono>

#include "kev/core/utc_time.h"

namespace kev {
namespace {

TEST(UtcTime, DatesAndTimestampsMatchPythonsDatetime) {
  using std::chrono::system_clock;
  struct Case {
    std::time_t t;
    const char* iso;  // datetime.fromtimestamp(t, timezone.utc).isoformat(), offset dropped
  };
  const Case cases[] = {{0, "1970-01-01T00:00:00"},
                        {951782400, "2000-02-29T00:00:00"},
                        {4102444799, "2099-12-31T23:59:59"},
                        {1764633600, "2025-12-02T00:00:00"}};
  for (const Case& c : cases) {
    const std::string iso = c.iso;
    EXPECT_EQ(utc_date(c.t), iso.substr(0, 10));
    const auto at = system_clock::from_time_t(c.t);
    EXPECT_EQ(utc_timestamp(at, false), iso + "Z");
    EXPECT_EQ(utc_timestamp(at + std::chrono::milliseconds(7), true), iso + ".007Z");
    EXPECT_EQ(utc_timestamp(at + std::chrono::microseconds(999999), true), iso + ".999Z");
  }
}

}  // namespace
}  // namespace kev
