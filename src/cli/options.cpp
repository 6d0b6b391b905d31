// The option checks and the parse-error sentences of every command (cli/options.h).
#include "cli/options.h"

#include <fmt/format.h>

#include <charconv>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <iostream>
#include <limits>
#include <optional>

#include "kev/core/error.h"
#include "kev/text/utf8.h"

namespace kev::cli {
namespace {

constexpr const char* kCheckName = "kev";

bool all_digits(const std::string& s, size_t from) {
  if (from >= s.size()) return false;
  for (size_t i = from; i < s.size(); ++i)
    if (s[i] < '0' || s[i] > '9') return false;
  return true;
}

// A plain decimal number: [+-] digits [. digits] [e [+-] digits], at least one mantissa digit.
bool decimal_syntax(const std::string& s) {
  size_t i = 0, digits = 0;
  if (i < s.size() && (s[i] == '+' || s[i] == '-')) ++i;
  for (; i < s.size() && s[i] >= '0' && s[i] <= '9'; ++i) ++digits;
  if (i < s.size() && s[i] == '.')
    for (++i; i < s.size() && s[i] >= '0' && s[i] <= '9'; ++i) ++digits;
  if (digits == 0) return false;
  if (i < s.size() && (s[i] == 'e' || s[i] == 'E')) {
    ++i;
    if (i < s.size() && (s[i] == '+' || s[i] == '-')) ++i;
    const size_t exp_start = i;
    for (; i < s.size() && s[i] >= '0' && s[i] <= '9'; ++i) {
    }
    if (i == exp_start) return false;
  }
  return i == s.size();
}

CLI::Validator named(std::function<std::string(std::string&)> f, std::string description) {
  return CLI::Validator(std::move(f), std::move(description), kCheckName);
}

std::string join(const std::vector<std::string>& words, const char* sep) {
  std::string out;
  for (const std::string& w : words) out += (out.empty() ? "" : sep) + w;
  return out;
}

bool has_check(CLI::Option* opt) {
  try {
    opt->get_validator(kCheckName);
    return true;
  } catch (const CLI::OptionNotFound&) {
    return false;
  }
}

// The command a parse error belongs to: the deepest subcommand that started parsing.
std::string command_of(CLI::App& app) {
  for (CLI::App* sub : app.get_subcommands([](CLI::App*) { return true; }))
    if (sub->parsed()) return "kev " + sub->get_name();
  return "kev";
}

template <typename T>
bool is(const CLI::ParseError& e) {
  return dynamic_cast<const T*>(&e) != nullptr;
}

std::string one_line(std::string s) {
  for (char& c : s)
    if (c == '\n' || c == '\r') c = ' ';
  return s;
}

}  // namespace

std::string read_stdin() {
  std::string out;
  std::streambuf* in = std::cin.rdbuf();
  char buf[65536];
  for (std::streamsize n; (n = in->sgetn(buf, sizeof buf)) > 0;) {
    if (out.size() + static_cast<size_t>(n) > kMaxStdinBytes)
      fail(ErrorKind::kBadInput, "stdin holds more than {} bytes", kMaxStdinBytes);
    out.append(buf, static_cast<size_t>(n));
  }
  return out;
}

bool read_stdin_line(std::string& line, size_t number) {
  line.clear();
  std::streambuf* in = std::cin.rdbuf();
  for (int c; (c = in->sbumpc()) != std::char_traits<char>::eof();) {
    if (c == '\n') return true;
    if (line.size() >= kMaxStdinBytes)
      fail(ErrorKind::kBadInput, "stdin line {} is longer than {} bytes", number, kMaxStdinBytes);
    line += static_cast<char>(c);
  }
  return !line.empty();
}

std::string shown(const std::string& value) {
  bool plain = !value.empty() && value.size() <= 64 && utf8_error_offset(value) == value.size();
  for (unsigned char c : value) plain = plain && c > 0x20 && c != 0x7f && c != '"';
  if (plain) return value;
  std::string out = "\"";
  const std::string cut = value.size() > 64 ? value.substr(0, 64) : value;
  for (unsigned char c : cut) {
    if (c == '"' || c == '\\') {
      out += '\\';
      out += static_cast<char>(c);
    } else if (c < 0x20 || c >= 0x7f) {
      out += fmt::format("\\x{:02x}", c);
    } else {
      out += static_cast<char>(c);
    }
  }
  return out + (value.size() > 64 ? "...\"" : "\"");
}

CLI::Validator whole(uint64_t min, uint64_t max) {
  return named(
      [min, max](std::string& s) -> std::string {
        uint64_t v = 0;
        const bool ok = all_digits(s, 0) &&
                        std::from_chars(s.data(), s.data() + s.size(), v).ec == std::errc() &&
                        v >= min && v <= max;
        if (ok) return "";
        return fmt::format("{}: must be a whole number from {} to {}", shown(s), min, max);
      },
      fmt::format("{}..{}", min, max));
}

CLI::Validator multiple_of(uint64_t unit, uint64_t min, uint64_t max) {
  return named(
      [unit, min, max](std::string& s) -> std::string {
        uint64_t v = 0;
        const bool ok = all_digits(s, 0) &&
                        std::from_chars(s.data(), s.data() + s.size(), v).ec == std::errc() &&
                        v >= min && v <= max && v % unit == 0;
        if (ok) return "";
        return fmt::format("{}: must be a whole number from {} to {}, a multiple of {}", shown(s),
                           min, max, unit);
      },
      fmt::format("{}..{} (multiple of {})", min, max, unit));
}

CLI::Validator integer(int64_t min, int64_t max) {
  return named(
      [min, max](std::string& s) -> std::string {
        int64_t v = 0;
        const bool ok = all_digits(s, !s.empty() && s[0] == '-' ? 1 : 0) &&
                        std::from_chars(s.data(), s.data() + s.size(), v).ec == std::errc() &&
                        v >= min && v <= max;
        if (ok) return "";
        return fmt::format("{}: must be a whole number from {} to {}", shown(s), min, max);
      },
      fmt::format("{}..{}", min, max));
}

CLI::Validator number(double lo, Bound lo_bound, double hi, Bound hi_bound) {
  const bool lo_open = lo_bound == Bound::kOpen, hi_open = hi_bound == Bound::kOpen;
  std::string range;
  if (!lo_open && !hi_open) range = fmt::format("from {} to {}", lo, hi);
  if (lo_open && !hi_open) range = fmt::format("above {} and at most {}", lo, hi);
  if (!lo_open && hi_open) range = fmt::format("from {} up to (not including) {}", lo, hi);
  if (lo_open && hi_open) range = fmt::format("above {} and below {}", lo, hi);
  return named(
      [=](std::string& s) -> std::string {
        if (decimal_syntax(s)) {
          const double v = std::strtod(s.c_str(), nullptr);
          const bool above = lo_open ? v > lo : v >= lo;
          const bool below = hi_open ? v < hi : v <= hi;
          if (std::isfinite(v) && above && below) return "";
        }
        return fmt::format("{}: must be a finite number {}", shown(s), range);
      },
      fmt::format("{}{}, {}{}", lo_open ? "(" : "[", lo, hi, hi_open ? ")" : "]"));
}

CLI::Validator one_of(std::vector<std::string> words) {
  const std::string list = join(words, ", ");
  return named(
      [words, list](std::string& s) -> std::string {
        for (const std::string& w : words)
          if (s == w) return "";
        return fmt::format("{}: must be one of {}", shown(s), list);
      },
      "{" + join(words, ",") + "}");
}

CLI::Validator text() {
  return named(
      [](std::string& s) -> std::string {
        if (s.empty()) return fmt::format("{}: must not be empty", shown(s));
        if (s.size() > kMaxTextBytes)
          return fmt::format("{}: is longer than {} bytes", shown(s), kMaxTextBytes);
        if (utf8_error_offset(s) != s.size())
          return fmt::format("{}: is not valid UTF-8", shown(s));
        for (unsigned char c : s)
          if (c < 0x20 || c == 0x7f) return fmt::format("{}: holds a control character", shown(s));
        return "";
      },
      "");
}

CLI::Validator path() {
  return text();
}

void check_every_option(CLI::App& app) {
  for (CLI::Option* opt : app.get_options()) {
    if (opt->get_type_size_max() == 0 || has_check(opt)) continue;  // flags take no value
    const std::string type = opt->get_type_name();
    if (type.find("UINT") != std::string::npos) {
      opt->check(whole(0, std::numeric_limits<uint64_t>::max()));
    } else if (type.find("INT") != std::string::npos) {
      opt->check(integer(std::numeric_limits<int64_t>::min(), std::numeric_limits<int64_t>::max()));
    } else if (type.find("FLOAT") != std::string::npos) {
      const double big = std::numeric_limits<double>::max();
      opt->check(number(-big, Bound::kClosed, big, Bound::kClosed));
    } else {
      opt->check(text());
    }
  }
  for (CLI::App* sub : app.get_subcommands([](CLI::App*) { return true; }))
    check_every_option(*sub);
}

int refuse_parse_error(CLI::App& app, const CLI::ParseError& e) {
  // By type: CLI11 names some errors after the command instead (ExtrasError of a subcommand).
  if (is<CLI::Success>(e) || is<CLI::CallForHelp>(e) || is<CLI::CallForAllHelp>(e) ||
      is<CLI::CallForVersion>(e))
    return app.exit(e);
  const std::string cmd = command_of(app);
  const std::string help = cmd + " --help";
  std::string msg = one_line(e.what());
  std::string sentence;
  auto after = [&](const std::string& prefix) -> std::optional<std::string> {
    if (msg.rfind(prefix, 0) == 0) return msg.substr(prefix.size());
    return std::nullopt;
  };
  if (is<CLI::ValidationError>(e)) {
    // "NAME: VALUE: why" (the checks above) -> "NAME VALUE: why"
    const size_t colon = msg.find(": ");
    sentence =
        colon == std::string::npos ? msg : msg.substr(0, colon) + " " + msg.substr(colon + 2);
  } else if (auto rest = after("Could not convert: ")) {
    const size_t eq = rest->find(" = ");
    sentence = eq == std::string::npos ? *rest + ": not a valid value"
                                       : rest->substr(0, eq) + " " + shown(rest->substr(eq + 3)) +
                                             ": not a valid value";
  } else if (is<CLI::ExtrasError>(e)) {
    std::string args = msg;
    if (auto r = after("The following arguments were not expected: ")) args = *r;
    if (auto r = after("The following argument was not expected: ")) args = *r;
    sentence = cmd == "kev"
                   ? fmt::format("{}: unknown command or argument (kev --help lists the commands)",
                                 shown(args))
                   : fmt::format("{}: unknown option or unexpected argument ({} lists the options)",
                                 shown(args), help);
  } else if (is<CLI::RequiredError>(e)) {
    // CLI11 checks requirements before leftovers: an unknown word is the likelier mistake.
    const std::vector<std::string> rest = app.remaining(true);
    if (cmd == "kev" && !rest.empty())
      sentence = fmt::format("{}: unknown command (kev --help lists the commands)", shown(rest[0]));
    else if (!rest.empty())
      sentence = fmt::format("{}: unknown option or unexpected argument ({} lists the options)",
                             shown(rest[0]), help);
    else if (cmd == "kev")
      sentence = "a command is required (kev --help lists them)";
    else
      sentence = fmt::format("{} ({} lists the options)", msg, help);
  } else if (is<CLI::ArgumentMismatch>(e)) {
    const size_t colon = msg.find(": ");
    const std::string name = colon == std::string::npos ? "" : msg.substr(0, colon);
    if (msg.find(" missing") != std::string::npos && !name.empty()) {
      sentence = name + ": needs a value";
    } else if (msg.find("At Most") != std::string::npos && !name.empty()) {
      sentence = name + ": given more than once (give it once)";
    } else {
      sentence = msg;
    }
  } else {
    sentence = msg;
  }
  std::fprintf(stderr, "%s: %s\n", cmd.c_str(), sentence.c_str());
  return 2;
}

}  // namespace kev::cli
