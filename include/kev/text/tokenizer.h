// Tokenizer: Hugging Face tokenizer.json of the byte-level BPE family (GPT-2, Qwen2/Qwen3/Qwen3.5).
//
// Contract:
// - Loads normalizer (null, NFC, or a Sequence of NFC), pre-tokenizer (Split with a Regex or
//   String pattern and behavior "Isolated", ByteLevel with or without its own regex, or a
//   Sequence of these), model BPE (merges as "a b" strings or ["a","b"] pairs) and added tokens.
//   Anything else (another model or pre-tokenizer type, byte_fallback, subword prefixes, ...)
//   is refused with Error(kUnsupported) naming the field.
// - encode(text, allow_special): text must be valid UTF-8 (else Error(kBadInput)). With
//   allow_special, every added token (special or not) found in the text maps to its id, with
//   the lstrip/rstrip/single_word/normalized rules of the HF tokenizers library; without it the
//   whole text is ordinary text. Then NFC, the pre-tokenizer regex, byte-level mapping and BPE.
// - Regex semantics follow the reference library (Oniguruma): \s / \S mean Unicode
//   White_Space-like {U+0009..U+000D, U+0085, Z*}; Unicode classes come from PCRE2.
// - decode(ids): token strings concatenated, byte-level chars mapped back to bytes, invalid
//   UTF-8 replaced by U+FFFD. Unknown ids are Error(kBadInput).
// - Thread-safe after construction (the word cache is internally locked).
#pragma once
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace kev {

struct AddedToken {
  int32_t id = 0;
  std::string content;
  bool special = false;
  bool lstrip = false;
  bool rstrip = false;
  bool single_word = false;
  bool normalized = false;
};

class Tokenizer {
 public:
  static Tokenizer from_file(const std::string& path);
  // `source` names the input in error messages.
  static Tokenizer from_json(std::string_view json_text, const std::string& source);

  Tokenizer(Tokenizer&&) noexcept;
  Tokenizer& operator=(Tokenizer&&) noexcept;
  ~Tokenizer();

  std::vector<int32_t> encode(std::string_view text, bool allow_special) const;
  // Appends to `out` (avoids a copy per call in the record encoder).
  void encode_into(std::string_view text, bool allow_special, std::vector<int32_t>& out) const;
  std::string decode(std::span<const int32_t> ids) const;

  // Id of a token by its content: added tokens first, then the BPE vocabulary.
  std::optional<int32_t> token_id(std::string_view content) const;
  // Largest id + 1 over the vocabulary and the added tokens.
  int32_t vocab_size() const;
  const std::vector<AddedToken>& added_tokens() const;

 private:
  struct Impl;
  explicit Tokenizer(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace kev
