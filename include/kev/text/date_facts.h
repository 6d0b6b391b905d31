// Upstream's date facts (kev/api.py date_facts / with_date_facts, KEV_DATE_FACTS=1 in kev serve):
// the model cannot subtract dates reliably, so every pair of absolute dates found in the rendered
// state is stated as one sentence ("August 3, 2026 is 12 days after July 22, 2026.").
//
// Contract (as upstream, Python 3 `re` on str and datetime.strptime):
// - Dates are found by the regex
//   \b(?:January|...|December) \d{1,2}, \d{4}\b|\b\d{4}-\d{2}-\d{2}\b
//   with Unicode \b and \d (PCRE2 UTF + UCP), leftmost first, non-overlapping; each is parsed as
//   "%B %d, %Y" (when it has a comma) or "%Y-%m-%d" with strptime's digit rules (%Y four
//   decimal digits of any script, %m and %d ASCII except the second digit of a day starting
//   1 or 2); a date that does not exist (February 30, year 0) is skipped. Equal raw strings
//   count once; order of first appearance.
// - For each pair i < j: "<raw j> is N day[s] after|before <raw i>." or "<raw j> is the same day
//   as <raw i>.", joined by single spaces; "" when fewer than two dates.
// - with_date_facts(state): removes a previous top-level annotation (object key "date_facts";
//   array elements that are exactly {"date_facts": ...}; a string's trailing
//   "\n\ndate_facts: ..." paragraphs), then, when the facts of render(state) are not empty, adds
//   them: object -> key "date_facts" last, array -> {"date_facts": facts} appended, string ->
//   "\n\ndate_facts: " + facts appended. Other values are returned unchanged.
#pragma once
#include <string>
#include <string_view>

#include "kev/text/api.h"

namespace kev {

std::string date_facts(std::string_view text);
OrderedJson with_date_facts(const OrderedJson& state);

}  // namespace kev
