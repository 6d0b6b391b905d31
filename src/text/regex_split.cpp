#define PCRE2_CODE_UNIT_WIDTH 8
#include "text/regex_split.h"

#include <pcre2.h>

#include "kev/core/error.h"

namespace kev::text_detail {
namespace {

// Oniguruma's Unicode \s: TAB..CR, NEL, and the separators (Zs, Zl, Zp).
constexpr std::string_view kSpaceItems = "\\t\\n\\x0B\\f\\r\\x{85}\\p{Z}";

std::string pcre2_message(int code) {
  PCRE2_UCHAR buf[256];
  pcre2_get_error_message(code, buf, sizeof(buf));
  return std::string(reinterpret_cast<const char*>(buf));
}

// Per-thread match data and JIT stack: one allocation per thread, not per call.
struct ThreadMatch {
  pcre2_match_data* data = pcre2_match_data_create(1, nullptr);
  pcre2_jit_stack* stack = pcre2_jit_stack_create(32 * 1024, 8 * 1024 * 1024, nullptr);
  pcre2_match_context* context = pcre2_match_context_create(nullptr);
  ThreadMatch() { pcre2_jit_stack_assign(context, nullptr, stack); }
  ~ThreadMatch() {
    pcre2_match_context_free(context);
    pcre2_jit_stack_free(stack);
    pcre2_match_data_free(data);
  }
};

ThreadMatch& thread_match() {
  thread_local ThreadMatch m;
  return m;
}

}  // namespace

std::string translate_pattern(std::string_view p, std::string_view where) {
  std::string out;
  out.reserve(p.size() + 64);
  bool in_class = false;
  for (size_t i = 0; i < p.size(); ++i) {
    char c = p[i];
    if (c == '\\' && i + 1 < p.size()) {
      char e = p[i + 1];
      ++i;
      if (e == 's') {
        if (in_class) {
          out += kSpaceItems;
        } else {
          out += '[';
          out += kSpaceItems;
          out += ']';
        }
      } else if (e == 'S') {
        if (in_class) {
          fail(ErrorKind::kUnsupported,
               "{}: \\S inside a character class is not supported in pre-tokenizer patterns",
               where);
        }
        out += "[^";
        out += kSpaceItems;
        out += ']';
      } else {
        out += '\\';
        out += e;
      }
      continue;
    }
    if (!in_class && c == '[') {
      in_class = true;
      out += c;
      // A ']' right after '[' or '[^' is a literal member, not the end of the class.
      if (i + 1 < p.size() && p[i + 1] == '^') out += p[++i];
      if (i + 1 < p.size() && p[i + 1] == ']') out += p[++i];
      continue;
    }
    if (in_class && c == '[') {
      fail(ErrorKind::kUnsupported, "{}: nested character classes are not supported", where);
    }
    if (in_class && c == ']') in_class = false;
    out += c;
  }
  return out;
}

RegexSplitter::RegexSplitter(std::string_view pattern, bool literal, std::string_view where) {
  std::string translated = literal ? std::string(pattern) : translate_pattern(pattern, where);
  uint32_t options = PCRE2_UTF | PCRE2_UCP | PCRE2_NO_UTF_CHECK;
  if (literal) options = PCRE2_UTF | PCRE2_LITERAL | PCRE2_NO_UTF_CHECK;
  int err = 0;
  PCRE2_SIZE err_offset = 0;
  code_ = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(translated.data()), translated.size(), options,
                        &err, &err_offset, nullptr);
  if (!code_) {
    fail(ErrorKind::kUnsupported, "{}: the pattern does not compile ({} at offset {})", where,
         pcre2_message(err), err_offset);
  }
  jit_ = pcre2_jit_compile(code_, PCRE2_JIT_COMPLETE) == 0;
}

RegexSplitter::~RegexSplitter() {
  if (code_) pcre2_code_free(code_);
}

RegexSplitter::RegexSplitter(RegexSplitter&& other) noexcept
    : code_(other.code_), jit_(other.jit_) {
  other.code_ = nullptr;
}

void RegexSplitter::split(std::string_view text, std::vector<std::string_view>& out) const {
  ThreadMatch& m = thread_match();
  const auto* subject = reinterpret_cast<PCRE2_SPTR>(text.data());
  size_t n = text.size(), pos = 0, gap_start = 0;
  while (pos < n) {
    int rc = jit_ ? pcre2_jit_match(code_, subject, n, pos, PCRE2_NO_UTF_CHECK, m.data, m.context)
                  : pcre2_match(code_, subject, n, pos, PCRE2_NO_UTF_CHECK, m.data, m.context);
    if (rc == PCRE2_ERROR_NOMATCH) break;
    if (rc < 0) {
      fail(ErrorKind::kBadInput, "pre-tokenizer regex failed on the text: {}", pcre2_message(rc));
    }
    PCRE2_SIZE* ov = pcre2_get_ovector_pointer(m.data);
    size_t s = ov[0], e = ov[1];
    if (e == s) {
      // An empty match isolates nothing; step one code point so the scan always advances.
      pos = s + 1;
      while (pos < n && (static_cast<unsigned char>(text[pos]) & 0xC0) == 0x80) ++pos;
      continue;
    }
    if (s > gap_start) out.push_back(text.substr(gap_start, s - gap_start));
    out.push_back(text.substr(s, e - s));
    gap_start = pos = e;
  }
  if (gap_start < n) out.push_back(text.substr(gap_start));
}

}  // namespace kev::text_detail
