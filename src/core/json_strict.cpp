// The strict JSON reader (kev/core/json_strict.h).
#include "kev/core/json_strict.h"

#include <fmt/format.h>

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

  bool parse_error(std::size_t, const std::string&, const nlohmann::detail::exception&) override {
    return false;
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

  std::string_view what_;
  JsonLimits limits_;
  OrderedJson root_;
  OrderedJson* slot_ = nullptr;
  std::vector<Open> stack_;
};

}  // namespace

OrderedJson parse_json_strict(std::string_view text, std::string_view what,
                              const JsonLimits& limits) {
  LinearBuilder builder(what, limits);
  if (!OrderedJson::sax_parse(text.begin(), text.end(), &builder))
    bad(fmt::format("{} is not valid JSON", what));
  return builder.take();
}

}  // namespace kev
