// RegexSplitter: one pre-tokenizer regex compiled with PCRE2 (UTF + UCP, JIT when available),
// splitting text "Isolated"-style (every match and every gap between matches is a piece).
// Private to the text layer.
#pragma once
#include <string>
#include <string_view>
#include <vector>

struct pcre2_real_code_8;

namespace kev::text_detail {

// Rewrites an Oniguruma/JS-style pattern for PCRE2: \s and \S get Oniguruma's Unicode meaning
// ({U+0009..U+000D, U+0085} plus categories Zs/Zl/Zp). Throws Error(kUnsupported) for
// constructs it cannot translate (\S inside a character class).
std::string translate_pattern(std::string_view pattern, std::string_view where);

class RegexSplitter {
 public:
  // literal: the pattern is a plain string (tokenizer.json {"String": ...}).
  RegexSplitter(std::string_view pattern, bool literal, std::string_view where);
  ~RegexSplitter();
  RegexSplitter(RegexSplitter&& other) noexcept;
  RegexSplitter& operator=(RegexSplitter&&) = delete;
  RegexSplitter(const RegexSplitter&) = delete;
  RegexSplitter& operator=(const RegexSplitter&) = delete;

  // Appends the pieces of `text` (valid UTF-8) to `out`, in order; empty pieces are dropped.
  void split(std::string_view text, std::vector<std::string_view>& out) const;

 private:
  pcre2_real_code_8* code_ = nullptr;
  bool jit_ = false;
};

}  // namespace kev::text_detail
