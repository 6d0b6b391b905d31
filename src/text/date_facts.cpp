#define PCRE2_CODE_UNIT_WIDTH 8
#include "kev/text/date_facts.h"

#include <pcre2.h>
#include <utf8proc.h>

#include <memory>
#include <optional>
#include <vector>

#include "kev/core/error.h"
#include "kev/text/utf8.h"

namespace kev {
namespace {

constexpr const char* kMonths[] = {"January",   "February", "March",    "April",
                                   "May",       "June",     "July",     "August",
                                   "September", "October",  "November", "December"};

struct Code {
  pcre2_code* code = nullptr;
  explicit Code(const char* pattern) {
    int err = 0;
    PCRE2_SIZE at = 0;
    code = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(pattern), PCRE2_ZERO_TERMINATED,
                         PCRE2_UTF | PCRE2_UCP, &err, &at, nullptr);
    if (!code) fail(ErrorKind::kInternal, "date facts: a built-in pattern does not compile");
  }
  ~Code() { pcre2_code_free(code); }
};

const Code& date_regex() {
  static const Code c(
      "\\b(?:January|February|March|April|May|June|July|August|September|October|November|"
      "December) \\d{1,2}, \\d{4}\\b|\\b\\d{4}-\\d{2}-\\d{2}\\b");
  return c;
}

const Code& suffix_regex() {
  static const Code c("(?:\\n\\ndate_facts: [^\\n]*)+$");
  return c;
}

struct MatchData {
  pcre2_match_data* data;
  explicit MatchData(const Code& c) : data(pcre2_match_data_create_from_pattern(c.code, nullptr)) {}
  ~MatchData() { pcre2_match_data_free(data); }
};

// A decimal digit (Unicode Nd) -> its value: Nd code points come in runs of ten, 0 to 9.
std::optional<int> digit_value(uint32_t cp) {
  if (utf8proc_category(static_cast<utf8proc_int32_t>(cp)) != UTF8PROC_CATEGORY_ND)
    return std::nullopt;
  int run = 0;
  while (cp > 0 &&
         utf8proc_category(static_cast<utf8proc_int32_t>(cp - 1)) == UTF8PROC_CATEGORY_ND) {
    --cp;
    ++run;
  }
  return run % 10;
}

std::vector<uint32_t> code_points(std::string_view s) {
  std::vector<uint32_t> out;
  for (size_t i = 0; i < s.size();) out.push_back(next_code_point(s, i));
  return out;
}

// strptime's %Y: four decimal digits of any script.
std::optional<int> year_of(const std::vector<uint32_t>& d) {
  if (d.size() != 4) return std::nullopt;
  int y = 0;
  for (uint32_t c : d) {
    auto v = digit_value(c);
    if (!v) return std::nullopt;
    y = y * 10 + *v;
  }
  return y;
}

// strptime's %d: 3[01] | [12]\d | 0[1-9] | [1-9], the whole field consumed.
std::optional<int> day_of(const std::vector<uint32_t>& d) {
  if (d.empty() || d.size() > 2 || d[0] < '0' || d[0] > '9') return std::nullopt;
  const int first = static_cast<int>(d[0] - '0');
  if (d.size() == 1) return first >= 1 ? std::optional<int>(first) : std::nullopt;
  if (first == 3 && (d[1] == '0' || d[1] == '1')) return 30 + static_cast<int>(d[1] - '0');
  if (first == 1 || first == 2) {
    auto v = digit_value(d[1]);
    if (v) return first * 10 + *v;
    return std::nullopt;
  }
  if (first == 0 && d[1] >= '1' && d[1] <= '9') return static_cast<int>(d[1] - '0');
  return std::nullopt;
}

// strptime's %m on exactly two characters: 1[0-2] | 0[1-9].
std::optional<int> month_of(const std::vector<uint32_t>& d) {
  if (d.size() != 2) return std::nullopt;
  if (d[0] == '1' && d[1] >= '0' && d[1] <= '2') return 10 + static_cast<int>(d[1] - '0');
  if (d[0] == '0' && d[1] >= '1' && d[1] <= '9') return static_cast<int>(d[1] - '0');
  return std::nullopt;
}

bool leap(int y) {
  return (y % 4 == 0 && y % 100 != 0) || y % 400 == 0;
}

// Days since 1970-01-01 of a valid proleptic Gregorian date (Howard Hinnant's algorithm).
int64_t days_from_civil(int y, int m, int d) {
  y -= m <= 2;
  const int64_t era = (y >= 0 ? y : y - 399) / 400;
  const int64_t yoe = y - era * 400;
  const int64_t doy = (153 * (m + (m > 2 ? -3 : 9)) + 2) / 5 + d - 1;
  const int64_t doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
  return era * 146097 + doe - 719468;
}

// The date a regex match denotes, or nullopt where strptime raises ValueError.
std::optional<int64_t> parse_date(std::string_view raw) {
  const std::vector<uint32_t> cps = code_points(raw);
  std::optional<int> y, m, d;
  if (raw.find(',') != std::string_view::npos) {
    // "<Month> <d>, <YYYY>"
    size_t sp = 0;
    while (cps[sp] != ' ') ++sp;
    const std::string month(raw.substr(0, sp));
    for (int i = 0; i < 12; ++i)
      if (month == kMonths[i]) m = i + 1;
    size_t comma = sp + 1;
    while (cps[comma] != ',') ++comma;
    d = day_of({cps.begin() + static_cast<std::ptrdiff_t>(sp + 1),
                cps.begin() + static_cast<std::ptrdiff_t>(comma)});
    y = year_of({cps.begin() + static_cast<std::ptrdiff_t>(comma + 2), cps.end()});
  } else {
    // "<YYYY>-<mm>-<dd>": the regex guarantees 4 + 1 + 2 + 1 + 2 code points.
    y = year_of({cps.begin(), cps.begin() + 4});
    m = month_of({cps.begin() + 5, cps.begin() + 7});
    d = day_of({cps.begin() + 8, cps.begin() + 10});
  }
  if (!y || !m || !d || *y < 1) return std::nullopt;
  static constexpr int kDays[] = {31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31};
  const int last = kDays[*m - 1] + (*m == 2 && leap(*y) ? 1 : 0);
  if (*d > last) return std::nullopt;
  return days_from_civil(*y, *m, *d);
}

std::string without_suffix(const std::string& s) {
  const Code& c = suffix_regex();
  PCRE2_SIZE n = s.size() + 1;
  std::string out(n, '\0');
  int rc = pcre2_substitute(
      c.code, reinterpret_cast<PCRE2_SPTR>(s.data()), s.size(), 0, PCRE2_SUBSTITUTE_GLOBAL, nullptr,
      nullptr, reinterpret_cast<PCRE2_SPTR>(""), 0, reinterpret_cast<PCRE2_UCHAR*>(out.data()), &n);
  if (rc < 0) fail(ErrorKind::kInternal, "date facts: substitution failed ({})", rc);
  out.resize(n);
  return out;
}

}  // namespace

std::string date_facts(std::string_view text) {
  const Code& c = date_regex();
  MatchData md(c);
  std::vector<std::pair<std::string, int64_t>> found;
  size_t at = 0;
  while (at <= text.size()) {
    // The whole text is checked for valid UTF-8 once, on the first call.
    int rc = pcre2_match(c.code, reinterpret_cast<PCRE2_SPTR>(text.data()), text.size(), at,
                         at == 0 ? 0 : PCRE2_NO_UTF_CHECK, md.data, nullptr);
    if (rc < 0) break;
    const PCRE2_SIZE* ov = pcre2_get_ovector_pointer(md.data);
    const std::string raw(text.substr(ov[0], ov[1] - ov[0]));
    at = ov[1];  // matches are never empty
    auto day = parse_date(raw);
    if (!day) continue;
    bool seen = false;
    for (const auto& f : found) seen = seen || f.first == raw;
    if (!seen) found.emplace_back(raw, *day);
  }
  std::string out;
  for (size_t i = 0; i < found.size(); ++i) {
    for (size_t j = i + 1; j < found.size(); ++j) {
      const int64_t n = found[j].second - found[i].second;
      if (!out.empty()) out += ' ';
      if (n == 0) {
        out += fmt::format("{} is the same day as {}.", found[j].first, found[i].first);
      } else {
        const int64_t a = n < 0 ? -n : n;
        out += fmt::format("{} is {} day{} {} {}.", found[j].first, a, a != 1 ? "s" : "",
                           n > 0 ? "after" : "before", found[i].first);
      }
    }
  }
  return out;
}

OrderedJson with_date_facts(const OrderedJson& state) {
  OrderedJson s;
  if (state.is_object()) {
    s = OrderedJson::object();
    for (auto it = state.begin(); it != state.end(); ++it)
      if (it.key() != "date_facts") s[it.key()] = it.value();
  } else if (state.is_array()) {
    s = OrderedJson::array();
    for (const OrderedJson& v : state)
      if (!(v.is_object() && v.size() == 1 && v.contains("date_facts"))) s.push_back(v);
  } else if (state.is_string()) {
    s = without_suffix(state.get<std::string>());
  } else {
    return state;
  }
  const std::string facts = date_facts(render(s));
  if (facts.empty()) return s;
  if (s.is_object()) {
    s["date_facts"] = facts;
  } else if (s.is_array()) {
    s.push_back(OrderedJson{{"date_facts", facts}});
  } else {
    s = s.get<std::string>() + "\n\ndate_facts: " + facts;
  }
  return s;
}

}  // namespace kev
