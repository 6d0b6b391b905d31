// Fuzzes the tokenizer and the Kev encoder on arbitrary bytes. The first byte picks the mode:
//   even: the rest is text. Invalid UTF-8 must be refused with kev::Error; valid text must
//         encode (with and without added tokens) to in-range ids, and plain encoding must decode
//         back to the NFC form of the text.
//   odd:  the rest is an API request body: it is parsed and, when valid, encoded with small
//         limits (strict and truncating); any refusal must be a kev::Error, and the layout's
//         invariants (positions, segments, readout indices) must hold.
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "kev/core/error.h"
#include "kev/text/api.h"
#include "kev/text/encoding.h"
#include "kev/text/tokenizer.h"
#include "kev/text/utf8.h"

namespace {

std::string byte_symbol(int b) {
  auto printable = [](int x) {
    return (x >= 33 && x <= 126) || (x >= 161 && x <= 172) || x >= 174;
  };
  int shifted = 0;
  for (int x = 0; x < b; ++x) shifted += printable(x) ? 0 : 1;
  std::string s;
  kev::append_utf8(s,
                   printable(b) ? static_cast<uint32_t>(b) : 256u + static_cast<uint32_t>(shifted));
  return s;
}

std::string json_escape(const std::string& s) {
  std::string o;
  for (char c : s) {
    if (c == '"' || c == '\\') o += '\\';
    o += c;
  }
  return o;
}

const kev::Tokenizer& tokenizer() {
  static const kev::Tokenizer tok = [] {
    std::string vocab;
    for (int b = 0; b < 256; ++b) {
      if (b) vocab += ',';
      vocab += '"';
      vocab += json_escape(byte_symbol(b));
      vocab += "\":";
      vocab += std::to_string(b);
    }
    // A few merges so BPE has work to do: "Ġt", "he", "Ġthe", "in", "ing", "Ġ" + "Ġ".
    const char* merges[][2] = {{"\u0120", "t"}, {"h", "e"},  {"\u0120t", "he"},
                               {"i", "n"},      {"in", "g"}, {"\u0120", "\u0120"}};
    std::string merge_list;
    int id = 256;
    for (auto& m : merges) {
      std::string joined = std::string(m[0]) + m[1];
      vocab += ",\"" + json_escape(joined) + "\":" + std::to_string(id++);
      if (!merge_list.empty()) merge_list += ',';
      merge_list += "[\"" + json_escape(m[0]) + "\",\"" + json_escape(m[1]) + "\"]";
    }
    std::string added;
    const char* names[] = {"<|fim_prefix|>", "<|fim_middle|>", "<|box_start|>",
                           "<|box_end|>",    "<|fim_suffix|>", "<think>"};
    for (const char* n : names) {
      if (!added.empty()) added += ',';
      added += "{\"id\":" + std::to_string(id++) + ",\"content\":\"" + n +
               "\",\"special\":true,\"normalized\":false}";
    }
    added += ",{\"id\":" + std::to_string(id++) +
             ",\"content\":\"<L>\",\"special\":true,\"lstrip\":true,\"rstrip\":true}";
    added += ",{\"id\":" + std::to_string(id++) +
             ",\"content\":\"\\u00e9t\\u00e9\",\"special\":false,\"normalized\":true}";
    std::string json =
        R"({"normalizer":{"type":"NFC"},"pre_tokenizer":{"type":"Sequence","pretokenizers":[{"type":"Split","pattern":{"Regex":"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?[\\p{L}\\p{M}]+|\\p{N}| ?[^\\s\\p{L}\\p{M}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"},"behavior":"Isolated","invert":false},{"type":"ByteLevel","add_prefix_space":false,"use_regex":false}]},"added_tokens":[)" +
        added + R"(],"model":{"type":"BPE","vocab":{)" + vocab + R"(},"merges":[)" + merge_list +
        "]}}";
    return kev::Tokenizer::from_json(json, "fuzz tokenizer");
  }();
  return tok;
}

void check_text(std::string_view text) {
  const kev::Tokenizer& tok = tokenizer();
  bool valid = kev::utf8_error_offset(text) == text.size();
  try {
    auto plain = tok.encode(text, false);
    if (!valid) __builtin_trap();
    for (int32_t id : plain) {
      if (id < 0 || id >= tok.vocab_size()) __builtin_trap();
    }
    if (tok.decode(plain) != kev::nfc(text)) __builtin_trap();
    auto special = tok.encode(text, true);
    for (int32_t id : special) {
      if (id < 0 || id >= tok.vocab_size()) __builtin_trap();
    }
    (void)tok.decode(special);
  } catch (const kev::Error&) {
    if (valid) __builtin_trap();  // valid UTF-8 is always tokenizable
  }
}

void check_request(std::string_view body, bool truncate) {
  const kev::Tokenizer& tok = tokenizer();
  static const kev::Delimiters delims = kev::delimiters_of(tok);
  try {
    kev::ApiRequest req = kev::parse_request(body);
    kev::EncodeLimits limits{16, 64, truncate, true};
    kev::Encoding e = kev::encode_record(tok, delims, kev::to_record(req), limits);
    size_t s = e.state_length;
    if (s < 1 || static_cast<int64_t>(s) > limits.max_state || e.ids[0] != delims.state)
      __builtin_trap();
    if (e.positions.size() != e.ids.size() || e.segments.size() != e.ids.size()) __builtin_trap();
    for (size_t k = 0; k < e.rows.size(); ++k) {
      size_t d = e.decide_index[k];
      if (e.ids[d] != delims.decide || e.segments[d] != static_cast<int32_t>(k + 1))
        __builtin_trap();
      for (size_t o : e.option_index[k]) {
        if (e.ids[o] != delims.option_close) __builtin_trap();
      }
      auto row = e.row_ids(k);
      if (static_cast<int64_t>(row.size()) > limits.max_row ||
          row[e.rows[k].decide] != delims.decide) {
        __builtin_trap();
      }
      if (e.positions[d] != static_cast<int32_t>(row.size() - 1)) __builtin_trap();
    }
    std::vector<std::vector<double>> probs;
    for (const auto& q : req.questions)
      probs.emplace_back(q.options.size(), 1.0 / static_cast<double>(q.options.size()));
    (void)kev::answers_json(req, probs);
  } catch (const kev::Error&) {
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  std::string_view rest(reinterpret_cast<const char*>(data) + 1, size - 1);
  if (data[0] % 2 == 0) {
    check_text(rest);
  } else {
    check_request(rest, data[0] & 2);
  }
  return 0;
}
