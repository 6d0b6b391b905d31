// Tokenizer and encoder units on small hand-made tokenizer.json files, where the expected ids
// follow from the BPE and added-token rules by hand. Parity with the reference on the real
// Qwen3 vocabulary is in tests/oracle/test_tokenizer_parity.py.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "kev/core/error.h"
#include "kev/text/encoding.h"
#include "kev/text/tokenizer.h"
#include "kev/text/utf8.h"

namespace kev {
namespace {

using Ids = std::vector<int32_t>;

// Byte-level symbols for bytes 0..255 (GPT-2 alphabet) get ids 0..255 in byte order.
std::string byte_symbol(int b) {
  bool printable = (b >= 33 && b <= 126) || (b >= 161 && b <= 172) || (b >= 174);
  int shifted = 0;
  for (int x = 0; x < b; ++x) {
    bool p = (x >= 33 && x <= 126) || (x >= 161 && x <= 172) || (x >= 174);
    if (!p) ++shifted;
  }
  std::string s;
  append_utf8(s, printable ? static_cast<uint32_t>(b) : 256u + static_cast<uint32_t>(shifted));
  return s;
}

std::string tokenizer_json(const std::string& merges, const std::string& extra_vocab,
                           const std::string& added, const std::string& pre) {
  std::string vocab;
  for (int b = 0; b < 256; ++b) {
    std::string sym = byte_symbol(b);
    std::string esc;
    for (char c : sym) {
      if (c == '"' || c == '\\') esc += '\\';
      esc += c;
    }
    if (b) vocab += ',';
    vocab += '"';
    vocab += esc;
    vocab += "\": ";
    vocab += std::to_string(b);
  }
  vocab += extra_vocab;
  return R"({"normalizer": {"type": "NFC"}, "pre_tokenizer": )" + pre + R"(, "added_tokens": [)" +
         added + R"(], "decoder": {"type": "ByteLevel"}, "model": {"type": "BPE", "vocab": {)" +
         vocab + R"(}, "merges": [)" + merges + "]}}";
}

const std::string kQwenPre =
    R"({"type": "Sequence", "pretokenizers": [{"type": "Split", "pattern": {"Regex": "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"}, "behavior": "Isolated", "invert": false}, {"type": "ByteLevel", "add_prefix_space": false, "use_regex": false}]})";

Tokenizer small(const std::string& added = "") {
  // ab=256, abc=257, "Ġa"... keep it tiny: merges a+b, ab+c, b+c (lower priority than ab+c).
  std::string extra = R"(, "ab": 256, "abc": 257, "bc": 258)";
  return Tokenizer::from_json(
      tokenizer_json(R"("a b", ["ab", "c"], "b c")", extra, added, kQwenPre), "small");
}

TEST(Tokenizer, BpeMergesByRankBothMergeEncodings) {
  Tokenizer t = small();
  EXPECT_EQ(t.encode("abc", false), (Ids{257}));
  EXPECT_EQ(t.encode("ab", false), (Ids{256}));
  EXPECT_EQ(t.encode("bc", false), (Ids{258}));
  EXPECT_EQ(t.encode("abcbc", false), (Ids{257, 258}));
  EXPECT_EQ(t.encode("ababab", false), (Ids{256, 256, 256}));
  EXPECT_EQ(t.encode("x", false), (Ids{'x'}));
  EXPECT_EQ(t.encode("", false), (Ids{}));
  // Long words take the heap path; same rules.
  std::string long_word;
  Ids want;
  for (int i = 0; i < 200; ++i) {
    long_word += "abc";
    want.push_back(257);
  }
  EXPECT_EQ(t.encode(long_word, false), want);
}

TEST(Tokenizer, AddedTokensOnlyWhenAllowed) {
  Tokenizer t = small(
      R"({"id": 300, "content": "<|x|>", "special": true, "normalized": false},
         {"id": 301, "content": "<|x|>y", "special": true, "normalized": false})");
  EXPECT_EQ(t.encode("a<|x|>b", true), (Ids{'a', 300, 'b'}));
  EXPECT_EQ(t.encode("<|x|>y", true), (Ids{301}));  // longest match wins
  Ids plain = t.encode("a<|x|>b", false);
  EXPECT_EQ(plain.size(), 7u);  // pieces a, <|, x, |>, b -> 7 bytes (no merges apply)
  EXPECT_EQ(t.token_id("<|x|>"), 300);
  EXPECT_EQ(t.token_id("abc"), 257);
  EXPECT_FALSE(t.token_id("nope").has_value());
  EXPECT_EQ(t.vocab_size(), 302);
}

TEST(Tokenizer, AddedTokenStripFlags) {
  Tokenizer t = small(
      R"({"id": 300, "content": "<L>", "special": true, "lstrip": true, "normalized": false},
         {"id": 301, "content": "<R>", "special": true, "rstrip": true, "normalized": false},
         {"id": 302, "content": "<W>", "special": true, "single_word": true, "normalized": false})");
  // lstrip swallows the whitespace before the token, rstrip the whitespace after it.
  EXPECT_EQ(t.encode("a  <L>b", true), (Ids{'a', 300, 'b'}));
  EXPECT_EQ(t.encode("a<R> \t b", true), (Ids{'a', 301, 'b'}));
  // single_word: only matched between non-word characters.
  EXPECT_EQ(t.encode(" <W> ", true), (Ids{t.encode(" ", false)[0], 302, t.encode(" ", false)[0]}));
  EXPECT_EQ(t.encode("x<W>", true), t.encode("x<W>", false));
}

TEST(Tokenizer, NormalizedAddedTokensMatchAfterNfc) {
  // "é" as a normalized added token also matches the decomposed form e + U+0301.
  Tokenizer t = small(R"({"id": 300, "content": "\u00e9", "special": false, "normalized": true})");
  EXPECT_EQ(t.encode("e\xCC\x81", true), (Ids{300}));
  EXPECT_EQ(t.encode("\xC3\xA9", true), (Ids{300}));
}

TEST(Tokenizer, OnigurumaWhitespaceClasses) {
  // \s follows Oniguruma (the reference library): U+0085 is whitespace, U+FEFF is not. Merges
  // across the piece boundary make the split visible: "!" + byte C2 (symbol U+00C2) -> 259,
  // "!" + byte EF (symbol U+00EF) -> 260.
  Tokenizer t = Tokenizer::from_json(
      tokenizer_json(R"("a b", "! \u00c2", "! \u00ef")",
                     R"(, "ab": 256, "!\u00c2": 259, "!\u00ef": 260)", "", kQwenPre),
      "ws");
  // "!" then NEL: NEL is \s, so " ?[^\s\p{L}\p{N}]+" stops before it: no merge.
  EXPECT_EQ(t.encode("!\xC2\x85", false), (Ids{'!', 0xC2, 0x85}));
  // "!" then U+FEFF: not \s, one piece, so "!" merges with the first byte.
  EXPECT_EQ(t.encode("!\xEF\xBB\xBF", false), (Ids{260, 0xBB, 0xBF}));
}

TEST(Tokenizer, InvalidUtf8IsAClearError) {
  Tokenizer t = small();
  for (std::string bad : {std::string("\xFF"), std::string("ok\xC3"), std::string("\xED\xA0\x80"),
                          std::string("\xC0\xAF"), std::string("\xF4\x90\x80\x80")}) {
    try {
      t.encode(bad, true);
      FAIL() << "accepted invalid UTF-8";
    } catch (const Error& e) {
      EXPECT_EQ(e.kind(), ErrorKind::kBadInput);
      EXPECT_NE(std::string(e.what()).find("not valid UTF-8"), std::string::npos);
    }
  }
}

TEST(Tokenizer, DecodeMapsBytesBackAndReplacesInvalidUtf8) {
  Tokenizer t = small(R"({"id": 300, "content": "<|x|>", "special": true, "normalized": false})");
  std::string s = "abc <|x|> \xE6\x97\xA5\xE6\x9C\xAC";
  EXPECT_EQ(t.decode(t.encode(s, true)), s);
  EXPECT_EQ(t.decode(Ids{0xE6}), "\xEF\xBF\xBD");
  EXPECT_THROW(t.decode(Ids{99999}), Error);
  EXPECT_THROW(t.decode(Ids{-1}), Error);
}

TEST(Tokenizer, RefusesOtherFamilies) {
  auto refused = [](const std::string& json, ErrorKind kind) {
    try {
      Tokenizer::from_json(json, "t");
      ADD_FAILURE() << "accepted";
    } catch (const Error& e) {
      EXPECT_EQ(e.kind(), kind) << e.what();
    }
  };
  refused("{", ErrorKind::kBadInput);
  refused(R"({"model": {"type": "WordPiece", "vocab": {}}})", ErrorKind::kUnsupported);
  refused(R"({"model": {"type": "Unigram", "vocab": []}})", ErrorKind::kUnsupported);
  std::string ok = tokenizer_json("", "", "", kQwenPre);
  std::string meta = ok;
  meta.replace(meta.find(R"({"type": "Sequence")"), kQwenPre.size(), R"({"type": "Metaspace"})");
  refused(meta, ErrorKind::kUnsupported);
  std::string norm = ok;
  norm.replace(norm.find(R"({"type": "NFC"})"), 15, R"({"type": "NFKC"})");
  refused(norm, ErrorKind::kUnsupported);
  std::string fallback = ok;
  fallback.replace(fallback.find(R"("type": "BPE")"), 13,
                   R"("type": "BPE", "byte_fallback": true)");
  refused(fallback, ErrorKind::kUnsupported);
  refused(tokenizer_json(R"("a q")", "", "", kQwenPre), ErrorKind::kBadInput);  // "aq" missing
}

TEST(Tokenizer, RefusesSparseIdsBeforeAllocating) {
  // 259 vocab entries + 1 added token: ids must stay below 260 + 65536.
  auto refusal = [](const std::string& json) {
    try {
      Tokenizer::from_json(json, "t");
      ADD_FAILURE() << "accepted";
    } catch (const Error& e) {
      EXPECT_EQ(e.kind(), ErrorKind::kBadInput) << e.what();
      return std::string(e.what());
    }
    return std::string();
  };
  const std::string extra = R"(, "ab": 256, "abc": 257, "bc": 258)";
  EXPECT_NE(refusal(tokenizer_json("", R"(, "ab": 1073741823)", "", kQwenPre)).find("1073741823"),
            std::string::npos);
  EXPECT_NE(
      refusal(tokenizer_json("", extra, R"({"id": 1073741823, "content": "<x>", "special": true})",
                             kQwenPre))
          .find("1073741823"),
      std::string::npos);
  EXPECT_NE(refusal(tokenizer_json("", extra, R"({"id": 65796, "content": "<x>"})", kQwenPre))
                .find("65796"),
            std::string::npos);
  // A gap just inside the rule is fine.
  Tokenizer t = Tokenizer::from_json(
      tokenizer_json("", extra, R"({"id": 65795, "content": "<x>", "special": true})", kQwenPre),
      "t");
  EXPECT_EQ(t.vocab_size(), 65796);
}

TEST(Tokenizer, RefusesDeeplyNestedSequences) {
  auto nested = [](const std::string& key, const std::string& leaf, int depth) {
    std::string s = leaf;
    for (int i = 0; i < depth; ++i) s = R"({"type": "Sequence", ")" + key + R"(": [)" + s + "]}";
    return s;
  };
  auto refused = [](const std::string& json, const std::string& needle) {
    try {
      Tokenizer::from_json(json, "t");
      ADD_FAILURE() << "accepted";
    } catch (const Error& e) {
      EXPECT_EQ(e.kind(), ErrorKind::kBadInput) << e.what();
      EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
    }
  };
  refused(tokenizer_json("", "", "", nested("pretokenizers", kQwenPre, 100)),
          "nested deeper than 16");
  std::string norm = tokenizer_json("", "", "", kQwenPre);
  norm.replace(norm.find(R"({"type": "NFC"})"), 15,
               nested("normalizers", R"({"type": "NFC"})", 100));
  refused(norm, "nested deeper than 16");
  // Shallow nesting, as real tokenizers use, still loads.
  EXPECT_NO_THROW(
      Tokenizer::from_json(tokenizer_json("", "", "", nested("pretokenizers", kQwenPre, 3)), "t"));
}

TEST(Encoding, EscapeRewritesOnlyNameTokens) {
  EXPECT_EQ(escape_user_text("<|im_start|>"), "<\xC2\xA6im_start\xC2\xA6>");
  EXPECT_EQ(escape_user_text("a<|x_1|>b<|y|>"), "a<\xC2\xA6x_1\xC2\xA6>b<\xC2\xA6y\xC2\xA6>");
  EXPECT_EQ(escape_user_text("<||> <|a b|> <|\xC3\xA9|> <|a|"), "<||> <|a b|> <|\xC3\xA9|> <|a|");
  EXPECT_EQ(escape_user_text("<|<|a|>|>"),
            "<|<\xC2\xA6"
            "a\xC2\xA6>|>");
}

TEST(Encoding, LayoutPositionsAndLimits) {
  Tokenizer t = small(
      R"({"id": 300, "content": "<|fim_prefix|>", "special": true, "normalized": false},
         {"id": 301, "content": "<|fim_middle|>", "special": true, "normalized": false},
         {"id": 302, "content": "<|box_start|>", "special": true, "normalized": false},
         {"id": 303, "content": "<|box_end|>", "special": true, "normalized": false},
         {"id": 304, "content": "<|fim_suffix|>", "special": true, "normalized": false})");
  Delimiters d = delimiters_of(t);
  EXPECT_EQ(d.state, 300);
  EXPECT_EQ(d.decide, 304);
  Record rec{"abc", {{"x", {"ab", "c"}}, {"", {"abc"}}}};
  Encoding e = encode_record(t, d, rec, {});
  // Written out by hand: [300 257] [301 'x' 302 256 303 302 'c' 303 304] [301 302 257 303 304]
  EXPECT_EQ(e.ids,
            (Ids{300, 257, 301, 'x', 302, 256, 303, 302, 'c', 303, 304, 301, 302, 257, 303, 304}));
  EXPECT_EQ(e.positions, (Ids{0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 2, 3, 4, 5, 6}));
  EXPECT_EQ(e.segments, (Ids{0, 0, 1, 1, 1, 1, 1, 1, 1, 1, 1, 2, 2, 2, 2, 2}));
  EXPECT_EQ(e.decide_index, (std::vector<size_t>{10, 15}));
  EXPECT_EQ(e.option_index, (std::vector<std::vector<size_t>>{{6, 9}, {14}}));
  EXPECT_EQ(e.row_ids(1), (Ids{300, 257, 301, 302, 257, 303, 304}));
  EXPECT_EQ(e.rows[1].decide, 6u);
  EXPECT_EQ(e.rows[1].options, (std::vector<size_t>{5}));
  EXPECT_FALSE(e.truncated);

  Record long_state{"x y z w", {{"q", {"o"}}}};  // 4 pieces: x, " y", " z", " w" -> 7 tokens
  EncodeLimits strict{3, 100, false, true};
  EXPECT_THROW(encode_record(t, d, long_state, strict), Error);
  EncodeLimits cut{3, 100, true, true};
  Encoding c = encode_record(t, d, long_state, cut);
  EXPECT_TRUE(c.truncated);
  EXPECT_EQ(c.state_length, 3u);
  EXPECT_EQ(c.state_tokens, 8u);
  EXPECT_EQ(c.ids[0], 300);
  EncodeLimits row{100, 13, false,
                   true};  // S = 8, branch = 6 (<q> q <opt> o </opt> <decide>) -> 14
  EXPECT_THROW(encode_record(t, d, long_state, row), Error);
  EncodeLimits row_ok{100, 14, false, true};
  EXPECT_NO_THROW(encode_record(t, d, long_state, row_ok));
}

TEST(Encoding, MissingDelimiterIsRefused) {
  Tokenizer t = small();
  EXPECT_THROW(delimiters_of(t), Error);
}

}  // namespace
}  // namespace kev
