// CPython's number and JSON output (kev/text/python_compat.h).
#include "kev/text/python_compat.h"

#include <charconv>
#include <cmath>
#include <cstdio>
#include <cstdlib>

#include "kev/core/error.h"
#include "kev/text/utf8.h"

namespace kev {

std::string python_float_repr(double v) {
  if (std::isnan(v)) return "nan";
  if (std::isinf(v)) return v > 0 ? "inf" : "-inf";
  if (v == 0) return std::signbit(v) ? "-0.0" : "0.0";
  char buf[64];
  auto r = std::to_chars(buf, buf + sizeof(buf), v, std::chars_format::scientific);
  std::string sci(buf, r.ptr);  // shortest round-trip digits: "-d.ddde+XX"
  bool neg = sci[0] == '-';
  if (neg) sci.erase(0, 1);
  size_t epos = sci.find('e');
  std::string mant = sci.substr(0, epos);
  int exp = std::atoi(sci.c_str() + epos + 1);
  std::string digits;
  for (char c : mant) {
    if (c != '.') digits += c;
  }
  std::string out;
  if (exp >= -5 + 1 && exp < 16) {  // Python repr: fixed when -4 <= exp < 16
    if (exp < 0) {
      out = "0." + std::string(static_cast<size_t>(-exp - 1), '0') + digits;
    } else if (static_cast<size_t>(exp) + 1 >= digits.size()) {
      out = digits + std::string(static_cast<size_t>(exp) + 1 - digits.size(), '0') + ".0";
    } else {
      out = digits.substr(0, static_cast<size_t>(exp) + 1) + "." +
            digits.substr(static_cast<size_t>(exp) + 1);
    }
  } else {
    out = digits.substr(0, 1);
    if (digits.size() > 1) out += "." + digits.substr(1);
    char e[16];
    std::snprintf(e, sizeof(e), "e%c%02d", exp < 0 ? '-' : '+', std::abs(exp));
    out += e;
  }
  return neg ? "-" + out : out;
}

namespace {

void dumps_string(const std::string& s, std::string& out) {
  out += '"';
  for (size_t i = 0; i < s.size();) {
    const unsigned char c = static_cast<unsigned char>(s[i]);
    if (c < 0x80) {
      ++i;
      switch (c) {
        case '"':
          out += "\\\"";
          break;
        case '\\':
          out += "\\\\";
          break;
        case '\n':
          out += "\\n";
          break;
        case '\r':
          out += "\\r";
          break;
        case '\t':
          out += "\\t";
          break;
        case '\b':
          out += "\\b";
          break;
        case '\f':
          out += "\\f";
          break;
        default:
          if (c < 0x20) {
            out += fmt::format("\\u{:04x}", c);
          } else {
            out += static_cast<char>(c);
          }
      }
      continue;
    }
    uint32_t cp = next_code_point(s, i);
    if (cp >= 0x10000) {
      cp -= 0x10000;
      out += fmt::format("\\u{:04x}\\u{:04x}", 0xD800 + (cp >> 10), 0xDC00 + (cp & 0x3FF));
    } else {
      out += fmt::format("\\u{:04x}", cp);
    }
  }
  out += '"';
}

void dumps(const OrderedJson& v, std::string& out) {
  switch (v.type()) {
    case OrderedJson::value_t::object: {
      out += '{';
      bool first = true;
      for (auto it = v.begin(); it != v.end(); ++it) {
        if (!first) out += ", ";
        first = false;
        dumps_string(it.key(), out);
        out += ": ";
        dumps(it.value(), out);
      }
      out += '}';
      break;
    }
    case OrderedJson::value_t::array: {
      out += '[';
      for (size_t i = 0; i < v.size(); ++i) {
        if (i) out += ", ";
        dumps(v[i], out);
      }
      out += ']';
      break;
    }
    case OrderedJson::value_t::string:
      dumps_string(v.get_ref<const std::string&>(), out);
      break;
    case OrderedJson::value_t::boolean:
      out += v.get<bool>() ? "true" : "false";
      break;
    case OrderedJson::value_t::number_float: {
      const double d = v.get<double>();
      out += std::isnan(d)   ? "NaN"
             : std::isinf(d) ? (d > 0 ? "Infinity" : "-Infinity")
                             : python_float_repr(d);
      break;
    }
    case OrderedJson::value_t::number_integer:
    case OrderedJson::value_t::number_unsigned:
      out += v.dump();
      break;
    default:
      out += "null";
  }
}

}  // namespace

std::string python_json_dumps(const OrderedJson& value) {
  std::string out;
  dumps(value, out);
  return out;
}

double python_round(double x, int decimals) {
  if (decimals < 0 || !std::isfinite(x)) return x;
  // printf rounds the exact binary value to nearest, ties to even, as Python's round() does;
  // the decimal string then converts to the nearest double.
  char buf[512];
  std::snprintf(buf, sizeof(buf), "%.*f", decimals, x);
  return std::strtod(buf, nullptr);
}

double python_sum(std::span<const double> items) {
  // CPython >= 3.12 builtin_sum_impl with the default start 0 (an int): the first float is added
  // to 0 (so -0.0 becomes 0.0), then every further float goes through Neumaier's compensated
  // step; the compensation is added at the end only when it is non-zero and finite (so an
  // overflowed or infinite sum is not turned into NaN, and a negative zero keeps its sign).
  if (items.empty()) return 0.0;
  double sum = 0.0 + items[0];
  double c = 0.0;
  for (size_t i = 1; i < items.size(); ++i) {
    const double x = items[i];
    const double t = sum + x;
    if (std::fabs(sum) >= std::fabs(x)) {
      c += (sum - t) + x;
    } else {
      c += (x - t) + sum;
    }
    sum = t;
  }
  if (c != 0.0 && std::isfinite(c)) sum += c;
  return sum;
}

}  // namespace kev
