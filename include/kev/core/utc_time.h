// Times as text in UTC (gmtime_r: no time zone, no locale), for the request log, bench metadata
// and the model card's release date.
#pragma once
#include <chrono>
#include <ctime>
#include <string>

namespace kev {

// YYYY-MM-DD
std::string utc_date(std::time_t t);
// YYYY-MM-DDTHH:MM:SSZ, or YYYY-MM-DDTHH:MM:SS.mmmZ with milliseconds.
std::string utc_timestamp(std::chrono::system_clock::time_point t, bool milliseconds);

}  // namespace kev
