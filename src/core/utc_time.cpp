#include "kev/core/utc_time.h"

#include <fmt/format.h>

namespace kev {
namespace {

std::tm utc(std::time_t t) {
  std::tm tm{};
  gmtime_r(&t, &tm);
  return tm;
}

}  // namespace

std::string utc_date(std::time_t t) {
  const std::tm tm = utc(t);
  return fmt::format("{:04}-{:02}-{:02}", tm.tm_year + 1900, tm.tm_mon + 1, tm.tm_mday);
}

std::string utc_timestamp(std::chrono::system_clock::time_point t, bool milliseconds) {
  const std::tm tm = utc(std::chrono::system_clock::to_time_t(t));
  std::string out = fmt::format("{:04}-{:02}-{:02}T{:02}:{:02}:{:02}", tm.tm_year + 1900,
                                tm.tm_mon + 1, tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec);
  if (milliseconds) {
    const auto ms =
        std::chrono::duration_cast<std::chrono::milliseconds>(t.time_since_epoch()).count() % 1000;
    out += fmt::format(".{:03}", ms);
  }
  return out + "Z";
}

}  // namespace kev
