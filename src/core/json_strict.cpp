// The strict JSON reader (kev/core/json_strict.h).
#include "kev/core/json_strict.h"

#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <string>
#include <unordered_set>
#include <vector>

#include "kev/core/error.h"

namespace kev {
namespace {

[[noreturn]] void bad(const std::string& msg) {
  throw Error(ErrorKind::kBadInput, msg);
}

}  // namespace

namespace {

// Builds an OrderedJson from SAX events in time linear in the text. nlohmann's own DOM parser
// inserts each key with ordered_map::operator[], a linear search, so an object of n keys costs
// O(n^2) (80k keys: ~17 s); here duplicates are found with a hash set per open object and each
// member is appended to the underlying vector directly.
class LinearBuilder : public nlohmann::json_sax<OrderedJson> {
 public:
  LinearBuilder(std::string_view what, const JsonLimits& limits) : what_(what), limits_(limits) {}

  OrderedJson take() { return std::move(root_); }

  bool null() override { return value(nullptr); }
  bool boolean(bool v) override { return value(v); }
  bool number_integer(number_integer_t v) override { return value(v); }
  bool number_unsigned(number_unsigned_t v) override { return value(v); }
  bool number_float(number_float_t v, const string_t&) override { return value(v); }
  bool string(string_t& v) override { return value(std::move(v)); }
  bool binary(binary_t&) override { return false; }  // never produced by the text parser

  bool start_object(std::size_t) override { return open(OrderedJson::object()); }
  bool start_array(std::size_t) override { return open(OrderedJson::array()); }
  bool end_object() override { return close(); }
  bool end_array() override { return close(); }

  bool key(string_t& k) override {
    Open& top = stack_.back();
    if (++top.count > limits_.max_object_keys)
      bad(fmt::format("{}: a JSON object has more than {} keys", what_, limits_.max_object_keys));
    if (!top.keys.insert(k).second)
      bad(fmt::format("{}: duplicate key \"{}\" in a JSON object", what_, k));
    auto& members = static_cast<OrderedJson::object_t::Container&>(
        top.value->get_ref<OrderedJson::object_t&>());
    members.emplace_back(std::move(k), nullptr);
    slot_ = &members.back().second;
    return true;
  }

  // Where and why the text is not JSON, kept to printable ASCII (the library's "last read" part
  // echoes input bytes, so only the number of an overflow is quoted, and only its first 40).
  bool parse_error(std::size_t position, const std::string& last_token,
                   const nlohmann::detail::exception& e) override {
    at_ = position;
    overflow_ = e.id == 406;  // out_of_range.406: a number no double holds (1e999)
    reason_ = json_error_reason(e.what());
    for (char c : std::string_view(last_token).substr(0, 40))
      token_ += c >= 0x20 && c < 0x7f ? c : '?';
    return false;
  }

  // `text` is the whole input: NaN / Infinity are recognised from the bytes where the failing
  // token starts (the lexer stops at their first letter).
  std::string why_not_json(std::string_view text) const {
    if (overflow_)
      return fmt::format(
          "{} holds the number {} (byte {}), beyond the range of a double: numbers "
          "must be finite",
          what_, token_, at_);
    if (non_finite_literal(text))
      return fmt::format("{} is not valid JSON (byte {}: NaN and Infinity are not JSON numbers)",
                         what_, at_);
    if (reason_.empty()) return fmt::format("{} is not valid JSON", what_);
    return fmt::format("{} is not valid JSON (byte {}: {})", what_, at_, reason_);
  }

 private:
  struct Open {
    OrderedJson* value;
    size_t count = 0;
    std::unordered_set<std::string> keys;  // objects only
  };

  // Where the next value goes: the root, the end of the open array, or the slot of the last key.
  OrderedJson* place(OrderedJson&& v) {
    if (stack_.empty()) {
      root_ = std::move(v);
      return &root_;
    }
    Open& top = stack_.back();
    if (top.value->is_array()) {
      if (++top.count > limits_.max_array_elements)
        bad(fmt::format("{}: a JSON array has more than {} elements", what_,
                        limits_.max_array_elements));
      auto& items = top.value->get_ref<OrderedJson::array_t&>();
      items.push_back(std::move(v));
      return &items.back();
    }
    *slot_ = std::move(v);
    return slot_;
  }
  bool value(OrderedJson&& v) {
    place(std::move(v));
    return true;
  }
  bool open(OrderedJson&& container) {
    // Rendering and answering recurse over the value; a bound keeps a hostile body from
    // overflowing the stack or costing time quadratic in its depth.
    if (stack_.size() >= limits_.max_depth)
      bad(fmt::format("{} nests JSON deeper than {} levels", what_, limits_.max_depth));
    // Only the innermost open container grows, so pointers to the outer ones stay valid.
    stack_.push_back(Open{place(std::move(container)), 0, {}});
    return true;
  }
  bool close() {
    stack_.pop_back();
    return true;
  }

  bool non_finite_literal(std::string_view text) const {
    // The lexer stops at the first byte no literal continues with: walk back over the word.
    size_t start = std::min(at_, text.size());
    while (start > 0 && (std::isalpha(static_cast<unsigned char>(text[start - 1])) ||
                         text[start - 1] == '-' || text[start - 1] == '+'))
      --start;
    std::string word;
    for (char c : text.substr(start, 9)) word += static_cast<char>(std::tolower(c));
    if (word.starts_with("-") || word.starts_with("+")) word.erase(0, 1);
    return word.starts_with("nan") || word.starts_with("inf");
  }

  std::string_view what_;
  std::size_t at_ = 0;
  bool overflow_ = false;
  std::string reason_, token_;
  JsonLimits limits_;
  OrderedJson root_;
  OrderedJson* slot_ = nullptr;
  std::vector<Open> stack_;
};

}  // namespace

OrderedJson parse_json_strict(std::string_view text, std::string_view what,
                              const JsonLimits& limits) {
  LinearBuilder builder(what, limits);
  if (!OrderedJson::sax_parse(text.begin(), text.end(), &builder)) bad(builder.why_not_json(text));
  return builder.take();
}

namespace {

// Whether v nests at most `depth` containers deep (checked without unbounded recursion).
bool shallow(const nlohmann::json& v, int depth) {
  if (v.is_primitive()) return true;
  if (depth == 0) return false;
  for (const auto& child : v)  // for an object: its values
    if (!shallow(child, depth - 1)) return false;
  return true;
}

}  // namespace

std::string shown_json(const nlohmann::json& v) {
  if (!shallow(v, 2)) return std::string(v.type_name());
  std::string s = v.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
  return s.size() > 80 ? s.substr(0, 80) + "..." : s;
}

std::string json_error_reason(std::string_view what) {
  if (auto colon = what.find(": ");
      what.find("parse error at") != std::string_view::npos && colon != std::string_view::npos)
    what.remove_prefix(colon + 2);  // "[json.exception...] parse error at line 1, column 5: "
  else if (auto bracket = what.find("] "); bracket != std::string_view::npos)
    what.remove_prefix(bracket + 2);
  what = what.substr(0, what.find("; last read"));
  std::string reason;
  for (char c : what.substr(0, 160)) reason += c >= 0x20 && c < 0x7f ? c : '?';
  return reason;
}

}  // namespace kev
