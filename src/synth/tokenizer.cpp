// The built-in synthetic tokenizer: a real byte-level BPE in the Qwen2/3 tokenizer.json
// layout, trained when called on an embedded English text, so the merges are genuine (each
// merge joins two existing tokens, ranks are the training order) and tests can encode text.
#include <algorithm>
#include <cstdint>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <unordered_map>
#include <vector>

#include "kev/synth/synth.h"

namespace kev {
namespace {

constexpr int kMerges = 320;

constexpr const char* kCorpus =
    "A decision model reads a state and answers questions about it. Each question has an "
    "instruction and a list of options, and the model returns a probability for every option. "
    "The state can be a short message, a long report, a record of what happened before, or a "
    "description of the world as it is now. The options are written by the caller in their own "
    "words, and the order of the options is kept. When the state changes, the answers change "
    "with it; when nothing important changes, the answers should stay the same. "
    "The pointer head compares the hidden state of the decide token with the hidden state at "
    "the end of each option, and a softmax over those scores gives the probabilities. A fitted "
    "temperature makes the probabilities honest without changing which option wins. "
    "Good decisions need good information. Before you choose, read the whole state, think about "
    "what the question is really asking, and then pick the option that fits best. If two options "
    "are close, the confidence should be low; if one option is clearly right, the confidence "
    "should be high. People often ask whether a message is urgent, whether a customer is happy, "
    "which team should handle a ticket, what the next step in a process should be, or how "
    "serious a problem is on a scale from one to five. Questions like these are the everyday "
    "work of a decision model, and they are answered many thousands of times every day. "
    "The weather today is warm and sunny in the morning, with clouds later in the afternoon and "
    "a chance of rain in the evening. The train leaves the station at seven and arrives in the "
    "city before nine. The report says that sales grew in the spring, fell in the summer, and "
    "recovered in the autumn. The customer wrote that the order arrived late, the box was "
    "damaged, and one of the items was missing, but the support team answered quickly and sent "
    "a replacement the next day. Should the ticket be closed, escalated, or kept open? "
    "Numbers and names appear everywhere: there were three meetings on Monday, two on Tuesday, "
    "and none on Friday. The system should handle questions in English and in other languages, "
    "with punctuation, quotes, brackets and symbols, and it should never be confused by text "
    "that looks like a special token. Every answer is a distribution over the options of one "
    "question only, never across questions. The model was trained with many examples of states "
    "and questions, and it learned which features of the state matter for each kind of question.";

// GPT-2's reversible byte <-> printable code point map, in its canonical order.
std::vector<std::pair<int, int>> byte_symbols() {
  std::vector<std::pair<int, int>> out;  // (byte, code point)
  std::vector<bool> printable(256, false);
  for (int b = 0; b < 256; ++b)
    printable[b] = (b >= 33 && b <= 126) || (b >= 161 && b <= 172) || (b >= 174 && b <= 255);
  for (int b = 0; b < 256; ++b)
    if (printable[b]) out.emplace_back(b, b);
  int next = 256;
  for (int b = 0; b < 256; ++b)
    if (!printable[b]) out.emplace_back(b, next++);
  return out;
}

std::string utf8(int cp) {
  std::string s;
  if (cp < 0x80) {
    s.push_back(static_cast<char>(cp));
  } else {  // all code points here are < 0x800
    s.push_back(static_cast<char>(0xC0 | (cp >> 6)));
    s.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  }
  return s;
}

bool is_letter(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z');
}

// Training pieces: an optional single space followed by ASCII letters, which is how the Qwen
// split pattern cuts plain English words.
std::map<std::string, int64_t> training_pieces() {
  std::map<std::string, int64_t> pieces;
  std::string text = kCorpus;
  for (size_t i = 0; i < text.size();) {
    size_t start = i;
    if (text[i] == ' ' && i + 1 < text.size() && is_letter(text[i + 1])) ++i;
    if (i < text.size() && is_letter(text[i])) {
      while (i < text.size() && is_letter(text[i])) ++i;
      ++pieces[text.substr(start, i - start)];
    } else {
      i = start + 1;
    }
  }
  return pieces;
}

}  // namespace

std::string default_tokenizer_json() {
  using ordered = nlohmann::ordered_json;
  std::vector<std::string> vocab;
  std::vector<int> byte_id(256);
  for (const auto& [b, cp] : byte_symbols()) {
    byte_id[b] = static_cast<int>(vocab.size());
    vocab.push_back(utf8(cp));
  }
  std::unordered_map<std::string, int> id_of;
  for (size_t i = 0; i < vocab.size(); ++i) id_of[vocab[i]] = static_cast<int>(i);

  std::vector<std::pair<std::vector<int>, int64_t>> words;
  for (const auto& [piece, count] : training_pieces()) {
    std::vector<int> ids;
    for (char c : piece) ids.push_back(byte_id[static_cast<uint8_t>(c)]);
    words.emplace_back(std::move(ids), count);
  }
  std::vector<std::string> merges;
  for (int m = 0; m < kMerges; ++m) {
    std::map<std::pair<int, int>, int64_t> pairs;
    for (const auto& [ids, count] : words)
      for (size_t i = 0; i + 1 < ids.size(); ++i) pairs[{ids[i], ids[i + 1]}] += count;
    auto best = pairs.end();
    for (auto it = pairs.begin(); it != pairs.end(); ++it)
      if (best == pairs.end() || it->second > best->second) best = it;  // ties: first in order
    if (best == pairs.end()) break;
    auto [a, b] = best->first;
    std::string joined = vocab[a] + vocab[b];
    auto found = id_of.find(joined);
    int merged = found != id_of.end() ? found->second : static_cast<int>(vocab.size());
    if (found == id_of.end()) {
      id_of[joined] = merged;
      vocab.push_back(joined);
    }
    merges.push_back(vocab[a] + " " + vocab[b]);
    for (auto& [ids, count] : words) {
      std::vector<int> next;
      for (size_t i = 0; i < ids.size(); ++i) {
        if (i + 1 < ids.size() && ids[i] == a && ids[i + 1] == b) {
          next.push_back(merged);
          ++i;
        } else {
          next.push_back(ids[i]);
        }
      }
      ids.swap(next);
    }
  }

  ordered j;
  j["version"] = "1.0";
  j["truncation"] = nullptr;
  j["padding"] = nullptr;
  ordered added = ordered::array();
  const char* specials[] = {"<|endoftext|>",  "<|im_start|>",   "<|im_end|>",
                            "<|box_start|>",  "<|box_end|>",    "<|fim_prefix|>",
                            "<|fim_middle|>", "<|fim_suffix|>", "<|fim_pad|>"};
  int next_id = static_cast<int>(vocab.size());
  for (const char* s : specials)
    added.push_back({{"id", next_id++},
                     {"content", s},
                     {"single_word", false},
                     {"lstrip", false},
                     {"rstrip", false},
                     {"normalized", false},
                     {"special", true}});
  j["added_tokens"] = added;
  j["normalizer"] = {{"type", "NFC"}};
  ordered byte_level = {{"type", "ByteLevel"},
                        {"add_prefix_space", false},
                        {"trim_offsets", false},
                        {"use_regex", false}};
  ordered split = {{"type", "Split"},
                   {"pattern",
                    {{"Regex",
                      "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| "
                      "?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|"
                      "\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"}}},
                   {"behavior", "Isolated"},
                   {"invert", false}};
  j["pre_tokenizer"] = {{"type", "Sequence"},
                        {"pretokenizers", ordered::array({split, byte_level})}};
  j["post_processor"] = byte_level;
  j["decoder"] = byte_level;
  ordered model = {{"type", "BPE"},
                   {"dropout", nullptr},
                   {"unk_token", nullptr},
                   {"continuing_subword_prefix", ""},
                   {"end_of_word_suffix", ""},
                   {"fuse_unk", false},
                   {"byte_fallback", false},
                   {"ignore_merges", false}};
  ordered v = ordered::object();
  for (size_t i = 0; i < vocab.size(); ++i) v[vocab[i]] = i;
  model["vocab"] = v;
  model["merges"] = merges;
  j["model"] = model;
  return j.dump(2, ' ', false) + "\n";
}

}  // namespace kev
