// Kev's five delimiter tokens, one definition for every reader: the record encoder
// (text/encoding.h, ids from the loaded tokenizer) and the exporter (export/configs.h, ids from
// tokenizer.json's added_tokens, recorded in the bundle manifest's "delimiters" in this order).
// Each is found by its content, never by a fixed id: state <|fim_prefix|>, question
// <|fim_middle|>, option_open <|box_start|>, option_close <|box_end|>, decide <|fim_suffix|>.
#pragma once
#include <array>
#include <cstdint>

namespace kev {

struct Delimiters {
  int32_t state = 0, question = 0, option_open = 0, option_close = 0, decide = 0;
};

struct DelimiterToken {
  const char* name;     // the manifest key
  const char* content;  // the token's text
  int32_t Delimiters::*id;
};
inline constexpr std::array<DelimiterToken, 5> kDelimiterTokens{{
    {"state", "<|fim_prefix|>", &Delimiters::state},
    {"question", "<|fim_middle|>", &Delimiters::question},
    {"option_open", "<|box_start|>", &Delimiters::option_open},
    {"option_close", "<|box_end|>", &Delimiters::option_close},
    {"decide", "<|fim_suffix|>", &Delimiters::decide},
}};

}  // namespace kev
