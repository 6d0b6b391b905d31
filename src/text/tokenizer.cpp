#include "kev/text/tokenizer.h"

#include <utf8proc.h>

#include <algorithm>
#include <array>
#include <mutex>
#include <nlohmann/json.hpp>
#include <queue>
#include <shared_mutex>
#include <unordered_map>

#include "kev/core/error.h"
#include "kev/core/file.h"
#include "kev/text/utf8.h"
#include "text/regex_split.h"

namespace kev {
namespace {

using nlohmann::json;
using text_detail::RegexSplitter;

// The GPT-2 byte-level alphabet: printable bytes stand for themselves, the others are shifted
// to U+0100 and up, in byte order.
struct ByteAlphabet {
  std::array<uint32_t, 256> to_cp{};
  std::unordered_map<uint32_t, uint8_t> to_byte;
  ByteAlphabet() {
    uint32_t next = 256;
    for (uint32_t b = 0; b < 256; ++b) {
      bool printable = (b >= 33 && b <= 126) || (b >= 161 && b <= 172) || (b >= 174);
      to_cp[b] = printable ? b : next++;
      to_byte[to_cp[b]] = static_cast<uint8_t>(b);
    }
  }
};

const ByteAlphabet& byte_alphabet() {
  static const ByteAlphabet a;
  return a;
}

// GPT-2's own pre-tokenizer pattern, used by ByteLevel when use_regex is true.
constexpr std::string_view kGpt2Pattern =
    "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+";

// Open-addressing map (left id, right id) -> (rank, merged id). Merge lookups dominate BPE time.
class MergeTable {
 public:
  struct Value {
    int32_t rank;
    int32_t merged;
  };
  void reserve(size_t n) {
    size_t cap = 16;
    while (cap < n * 2) cap <<= 1;
    keys_.assign(cap, kEmpty);
    values_.assign(cap, {0, 0});
    mask_ = cap - 1;
  }
  // Keeps the first (lowest-rank) entry of a duplicated pair, as the reference does.
  void insert(int32_t a, int32_t b, Value v) {
    uint64_t k = key(a, b);
    size_t i = hash(k) & mask_;
    while (keys_[i] != kEmpty) {
      if (keys_[i] == k) return;
      i = (i + 1) & mask_;
    }
    keys_[i] = k;
    values_[i] = v;
  }
  const Value* find(int32_t a, int32_t b) const {
    uint64_t k = key(a, b);
    size_t i = hash(k) & mask_;
    while (keys_[i] != kEmpty) {
      if (keys_[i] == k) return &values_[i];
      i = (i + 1) & mask_;
    }
    return nullptr;
  }

 private:
  static constexpr uint64_t kEmpty = ~uint64_t{0};
  static uint64_t key(int32_t a, int32_t b) {
    return (static_cast<uint64_t>(static_cast<uint32_t>(a)) << 32) | static_cast<uint32_t>(b);
  }
  static size_t hash(uint64_t k) {
    k ^= k >> 33;
    k *= 0xff51afd7ed558ccdULL;
    k ^= k >> 33;
    return static_cast<size_t>(k);
  }
  std::vector<uint64_t> keys_;
  std::vector<Value> values_;
  size_t mask_ = 0;
};

constexpr int32_t kNoRank = INT32_MAX;
constexpr size_t kCacheMaxEntries = 1 << 18;
constexpr size_t kCacheMaxPiece = 256;

bool is_word_char(uint32_t cp) {
  if (cp == '_') return true;
  auto cat = utf8proc_category(static_cast<utf8proc_int32_t>(cp));
  return (cat >= UTF8PROC_CATEGORY_LU && cat <= UTF8PROC_CATEGORY_LO) ||
         (cat >= UTF8PROC_CATEGORY_ND && cat <= UTF8PROC_CATEGORY_NO);
}

uint32_t last_code_point(std::string_view s) {
  size_t i = s.size();
  do {
    --i;
  } while (i > 0 && (static_cast<unsigned char>(s[i]) & 0xC0) == 0x80);
  size_t j = i;
  return next_code_point(s, j);
}

const json& member(const json& obj, const char* key, const std::string& where) {
  auto it = obj.find(key);
  if (it == obj.end()) fail(ErrorKind::kBadInput, "{}: missing field \"{}\"", where, key);
  return *it;
}

bool flag(const json& obj, const char* key, bool fallback) {
  auto it = obj.find(key);
  if (it == obj.end() || it->is_null()) return fallback;
  if (!it->is_boolean())
    fail(ErrorKind::kBadInput, "tokenizer field \"{}\" must be a boolean", key);
  return it->get<bool>();
}

std::string type_of(const json& node, const std::string& where) {
  if (!node.is_object()) fail(ErrorKind::kBadInput, "{} must be an object", where);
  const json& t = member(node, "type", where);
  if (!t.is_string()) fail(ErrorKind::kBadInput, "{}.type must be a string", where);
  return t.get<std::string>();
}

}  // namespace

struct Tokenizer::Impl {
  std::string source;
  bool nfc = false;
  std::vector<RegexSplitter> splitters;
  std::unordered_map<std::string, int32_t> vocab;  // byte-level token string -> id
  std::vector<std::string> id_to_token;            // id -> token string (vocab or added content)
  std::vector<bool> id_is_added;
  std::array<int32_t, 256> byte_id{};
  MergeTable merges;
  bool ignore_merges = false;
  std::vector<AddedToken> added;
  std::unordered_map<std::string, int32_t> added_by_content;
  // Match lists by first byte, longest first: raw-text tokens and normalized-text tokens.
  std::array<std::vector<const AddedToken*>, 256> raw_first, norm_first;
  std::vector<std::string> norm_content;  // parallel to `added`: content as matched
  bool any_raw = false, any_norm = false;
  int32_t size = 0;
  int64_t id_limit = 0;  // every token id must be below this (see load)

  mutable std::shared_mutex cache_mutex;
  mutable std::unordered_map<std::string, std::vector<int32_t>> cache;

  void load(const json& root);
  void load_normalizer(const json& node, int depth = 0);
  void load_pre_tokenizer(const json& node, const std::string& where, int depth = 0);
  void load_model(const json& node);
  void load_added(const json& node);

  void bpe(std::string_view piece, std::vector<int32_t>& out) const;
  void bpe_uncached(std::string_view piece, std::vector<int32_t>& out) const;
  void encode_plain(std::string_view text, std::vector<int32_t>& out) const;
  void encode_normalized(std::string_view normalized, std::vector<int32_t>& out) const;
  template <typename Emit>
  void split_added(std::string_view text,
                   const std::array<std::vector<const AddedToken*>, 256>& by_first,
                   bool use_norm_content, Emit&& emit) const;
};

// ---- loading ---------------------------------------------------------------------------

// Real tokenizers nest Sequence once or twice; the bound keeps the recursion (and the
// ever-longer `where` strings) small for hostile files.
constexpr int kMaxSequenceDepth = 16;
constexpr int64_t kMaxIdGap = 65536;

void Tokenizer::Impl::load(const json& root) {
  if (!root.is_object()) fail(ErrorKind::kBadInput, "{}: not a JSON object", source);
  // Ids index a dense table, so they may leave gaps but not run far past the number of tokens
  // (a single id of 2^30 in a tiny file would otherwise allocate gigabytes): every id must be
  // below (vocab entries + added tokens) + kMaxIdGap, and below INT32_MAX / 2.
  const json& model = member(root, "model", source);
  int64_t entries = 0;
  if (auto v = model.find("vocab"); model.is_object() && v != model.end() && v->is_object())
    entries += static_cast<int64_t>(v->size());
  if (auto a = root.find("added_tokens"); a != root.end() && a->is_array())
    entries += static_cast<int64_t>(a->size());
  id_limit = std::min<int64_t>(entries + kMaxIdGap, INT32_MAX / 2 + 1);
  load_model(model);
  load_normalizer(root.value("normalizer", json()));
  const json& pre = root.value("pre_tokenizer", json());
  if (pre.is_null()) {
    fail(ErrorKind::kUnsupported, "{}: a byte-level BPE tokenizer needs a ByteLevel pre-tokenizer",
         source);
  }
  load_pre_tokenizer(pre, source + " pre_tokenizer");
  if (auto it = root.find("added_tokens"); it != root.end() && !it->is_null()) load_added(*it);
  size = static_cast<int32_t>(id_to_token.size());
}

void Tokenizer::Impl::load_normalizer(const json& node, int depth) {
  if (node.is_null()) return;
  std::string where = source + " normalizer";
  std::string type = type_of(node, where);
  if (type == "NFC") {
    nfc = true;
  } else if (type == "Sequence") {
    if (depth >= kMaxSequenceDepth)
      fail(ErrorKind::kBadInput, "{}: Sequence normalizers are nested deeper than {} levels", where,
           kMaxSequenceDepth);
    for (const json& n : member(node, "normalizers", where)) load_normalizer(n, depth + 1);
  } else {
    fail(ErrorKind::kUnsupported, "{}: normalizer type \"{}\" is not supported (only NFC)", where,
         type);
  }
}

void Tokenizer::Impl::load_pre_tokenizer(const json& node, const std::string& where, int depth) {
  std::string type = type_of(node, where);
  if (type == "Sequence") {
    if (depth >= kMaxSequenceDepth)
      fail(ErrorKind::kBadInput, "{}: Sequence pre-tokenizers are nested deeper than {} levels",
           where, kMaxSequenceDepth);
    const json& list = member(node, "pretokenizers", where);
    for (size_t i = 0; i < list.size(); ++i) {
      load_pre_tokenizer(list[i], where + "[" + std::to_string(i) + "]", depth + 1);
    }
  } else if (type == "Split") {
    const json& pattern = member(node, "pattern", where);
    std::string behavior = node.value("behavior", std::string("Isolated"));
    if (behavior != "Isolated") {
      fail(ErrorKind::kUnsupported, "{}: Split behavior \"{}\" is not supported (only Isolated)",
           where, behavior);
    }
    if (flag(node, "invert", false)) {
      fail(ErrorKind::kUnsupported, "{}: Split with invert=true is not supported", where);
    }
    if (pattern.contains("Regex") && pattern["Regex"].is_string()) {
      splitters.emplace_back(pattern["Regex"].get<std::string>(), false, where);
    } else if (pattern.contains("String") && pattern["String"].is_string()) {
      splitters.emplace_back(pattern["String"].get<std::string>(), true, where);
    } else {
      fail(ErrorKind::kBadInput, "{}: pattern must be {{\"Regex\": ...}} or {{\"String\": ...}}",
           where);
    }
  } else if (type == "ByteLevel") {
    if (flag(node, "add_prefix_space", false)) {
      fail(ErrorKind::kUnsupported, "{}: ByteLevel add_prefix_space=true is not supported", where);
    }
    if (flag(node, "use_regex", true)) splitters.emplace_back(kGpt2Pattern, false, where);
  } else {
    fail(ErrorKind::kUnsupported,
         "{}: pre-tokenizer type \"{}\" is not supported (Split, ByteLevel, Sequence)", where,
         type);
  }
}

void Tokenizer::Impl::load_model(const json& node) {
  std::string where = source + " model";
  std::string type = type_of(node, where);
  if (type != "BPE") {
    fail(ErrorKind::kUnsupported, "{}: model type \"{}\" is not supported (only byte-level BPE)",
         where, type);
  }
  if (flag(node, "byte_fallback", false)) {
    fail(ErrorKind::kUnsupported, "{}: byte_fallback=true is not supported", where);
  }
  for (const char* key : {"continuing_subword_prefix", "end_of_word_suffix"}) {
    auto it = node.find(key);
    if (it != node.end() && !it->is_null() &&
        !(it->is_string() && it->get<std::string>().empty())) {
      fail(ErrorKind::kUnsupported, "{}: {} is not supported", where, key);
    }
  }
  if (auto it = node.find("dropout");
      it != node.end() && !it->is_null() && it->get<double>() != 0.0) {
    fail(ErrorKind::kUnsupported, "{}: BPE dropout is not supported", where);
  }
  ignore_merges = flag(node, "ignore_merges", false);

  const json& v = member(node, "vocab", where);
  if (!v.is_object()) fail(ErrorKind::kBadInput, "{}.vocab must be an object", where);
  vocab.reserve(v.size() * 2);
  int32_t max_id = -1;
  for (auto it = v.begin(); it != v.end(); ++it) {
    if (!it.value().is_number_integer() || it.value().get<int64_t>() < 0) {
      fail(ErrorKind::kBadInput, "{}.vocab[\"{}\"] must be a non-negative integer id", where,
           it.key());
    }
    if (it.value().get<int64_t>() >= id_limit) {
      fail(ErrorKind::kBadInput,
           "{}.vocab[\"{}\"] has id {}, far past the number of tokens; ids must be below {}", where,
           it.key(), it.value().get<int64_t>(), id_limit);
    }
    auto id = static_cast<int32_t>(it.value().get<int64_t>());
    vocab.emplace(it.key(), id);
    max_id = std::max(max_id, id);
  }
  id_to_token.assign(static_cast<size_t>(max_id + 1), std::string());
  id_is_added.assign(id_to_token.size(), false);
  for (const auto& [tok, id] : vocab) id_to_token[static_cast<size_t>(id)] = tok;

  const ByteAlphabet& alpha = byte_alphabet();
  for (int b = 0; b < 256; ++b) {
    std::string sym;
    append_utf8(sym, alpha.to_cp[static_cast<size_t>(b)]);
    auto it = vocab.find(sym);
    if (it == vocab.end()) {
      fail(ErrorKind::kUnsupported,
           "{}: the vocabulary lacks the byte-level symbol for byte 0x{:02X}; only complete "
           "byte-level BPE vocabularies are supported",
           where, b);
    }
    byte_id[static_cast<size_t>(b)] = it->second;
  }

  const json& m = member(node, "merges", where);
  if (!m.is_array()) fail(ErrorKind::kBadInput, "{}.merges must be an array", where);
  merges.reserve(m.size());
  std::string left, right;
  for (size_t rank = 0; rank < m.size(); ++rank) {
    const json& e = m[rank];
    if (e.is_string()) {
      const std::string& s = e.get_ref<const std::string&>();
      size_t sp = s.find(' ');
      if (sp == std::string::npos || s.find(' ', sp + 1) != std::string::npos) {
        fail(ErrorKind::kBadInput, "{}.merges[{}] \"{}\" is not two symbols separated by a space",
             where, rank, s);
      }
      left = s.substr(0, sp);
      right = s.substr(sp + 1);
    } else if (e.is_array() && e.size() == 2 && e[0].is_string() && e[1].is_string()) {
      left = e[0].get<std::string>();
      right = e[1].get<std::string>();
    } else {
      fail(ErrorKind::kBadInput, "{}.merges[{}] must be \"a b\" or [\"a\", \"b\"]", where, rank);
    }
    auto a = vocab.find(left), b = vocab.find(right), ab = vocab.find(left + right);
    if (a == vocab.end() || b == vocab.end() || ab == vocab.end()) {
      fail(ErrorKind::kBadInput,
           "{}.merges[{}] ({} + {}) uses a symbol missing from the vocabulary", where, rank, left,
           right);
    }
    merges.insert(a->second, b->second, {static_cast<int32_t>(rank), ab->second});
  }
}

void Tokenizer::Impl::load_added(const json& node) {
  std::string where = source + " added_tokens";
  if (!node.is_array()) fail(ErrorKind::kBadInput, "{} must be an array", where);
  for (const json& t : node) {
    if (!t.is_object()) fail(ErrorKind::kBadInput, "{}: every entry must be an object", where);
    AddedToken a;
    const json& id = member(t, "id", where);
    const json& content = member(t, "content", where);
    if (!id.is_number_integer() || id.get<int64_t>() < 0) {
      fail(ErrorKind::kBadInput, "{}: id must be a non-negative integer", where);
    }
    if (id.get<int64_t>() >= id_limit) {
      fail(ErrorKind::kBadInput, "{}: id {} is far past the number of tokens; ids must be below {}",
           where, id.get<int64_t>(), id_limit);
    }
    if (!content.is_string() || content.get<std::string>().empty()) {
      fail(ErrorKind::kBadInput, "{}: content must be a non-empty string", where);
    }
    a.id = static_cast<int32_t>(id.get<int64_t>());
    a.content = content.get<std::string>();
    validate_utf8(a.content, where + " content");
    a.special = flag(t, "special", false);
    a.lstrip = flag(t, "lstrip", false);
    a.rstrip = flag(t, "rstrip", false);
    a.single_word = flag(t, "single_word", false);
    // HF default: normalized = !special.
    a.normalized = flag(t, "normalized", !a.special);
    added.push_back(std::move(a));
  }
  for (const AddedToken& a : added) {
    added_by_content[a.content] = a.id;
    auto idx = static_cast<size_t>(a.id);
    if (idx >= id_to_token.size()) {
      id_to_token.resize(idx + 1);
      id_is_added.resize(idx + 1, false);
    }
    id_to_token[idx] = a.content;
    id_is_added[idx] = true;
  }
  norm_content.resize(added.size());
  for (size_t i = 0; i < added.size(); ++i) {
    const AddedToken& a = added[i];
    norm_content[i] = (a.normalized && nfc) ? kev::nfc(a.content) : a.content;
    const std::string& key = a.normalized ? norm_content[i] : a.content;
    auto& list = a.normalized ? norm_first : raw_first;
    list[static_cast<unsigned char>(key[0])].push_back(&a);
    (a.normalized ? any_norm : any_raw) = true;
  }
  auto longest_first = [this](const AddedToken* x, const AddedToken* y) {
    size_t lx =
        (x->normalized ? norm_content[static_cast<size_t>(x - added.data())] : x->content).size();
    size_t ly =
        (y->normalized ? norm_content[static_cast<size_t>(y - added.data())] : y->content).size();
    return lx > ly;
  };
  for (auto& l : raw_first) std::stable_sort(l.begin(), l.end(), longest_first);
  for (auto& l : norm_first) std::stable_sort(l.begin(), l.end(), longest_first);
}

// ---- encoding --------------------------------------------------------------------------

// Leftmost-longest non-overlapping matches of the added tokens, then the lstrip / rstrip /
// single_word rules as the reference library applies them. emit(token or nullptr, piece).
template <typename Emit>
void Tokenizer::Impl::split_added(std::string_view text,
                                  const std::array<std::vector<const AddedToken*>, 256>& by_first,
                                  bool use_norm_content, Emit&& emit) const {
  size_t start_offset = 0, pos = 0, n = text.size();
  while (pos < n) {
    const auto& candidates = by_first[static_cast<unsigned char>(text[pos])];
    const AddedToken* hit = nullptr;
    size_t hit_len = 0;
    for (const AddedToken* a : candidates) {
      const std::string& c =
          use_norm_content ? norm_content[static_cast<size_t>(a - added.data())] : a->content;
      if (c.size() <= n - pos && text.compare(pos, c.size(), c) == 0) {
        hit = a;
        hit_len = c.size();
        break;
      }
    }
    if (!hit) {
      ++pos;
      continue;
    }
    size_t start = pos, stop = pos + hit_len;
    pos = stop;
    if (start < start_offset) continue;
    if (hit->single_word) {
      bool start_ok = start == 0 || !is_word_char(last_code_point(text.substr(0, start)));
      size_t j = stop;
      bool stop_ok = stop == n || !is_word_char(next_code_point(text, j));
      if (!start_ok || !stop_ok) continue;
    }
    if (hit->lstrip) {
      size_t s = start;
      while (s > start_offset) {
        size_t k = s;
        do {
          --k;
        } while (k > 0 && (static_cast<unsigned char>(text[k]) & 0xC0) == 0x80);
        size_t j = k;
        if (!is_unicode_white_space(next_code_point(text, j))) break;
        s = k;
      }
      start = s;
    }
    if (hit->rstrip) {
      size_t j = stop;
      while (j < n) {
        size_t k = j;
        if (!is_unicode_white_space(next_code_point(text, k))) break;
        j = k;
      }
      stop = j;
      pos = std::max(pos, stop);
    }
    if (start > start_offset) emit(nullptr, text.substr(start_offset, start - start_offset));
    emit(hit, text.substr(start, stop - start));
    start_offset = stop;
  }
  if (start_offset < n) emit(nullptr, text.substr(start_offset));
}

void Tokenizer::Impl::encode_normalized(std::string_view normalized,
                                        std::vector<int32_t>& out) const {
  if (normalized.empty()) return;
  std::vector<std::string_view> pieces{normalized}, next;
  for (const RegexSplitter& s : splitters) {
    next.clear();
    for (std::string_view p : pieces) s.split(p, next);
    pieces.swap(next);
  }
  for (std::string_view p : pieces) bpe(p, out);
}

void Tokenizer::Impl::encode_plain(std::string_view text, std::vector<int32_t>& out) const {
  std::string normalized = nfc ? kev::nfc(text) : std::string(text);
  if (!any_norm) {
    encode_normalized(normalized, out);
    return;
  }
  split_added(normalized, norm_first, true, [&](const AddedToken* a, std::string_view piece) {
    if (a) {
      out.push_back(a->id);
    } else {
      encode_normalized(piece, out);
    }
  });
}

void Tokenizer::Impl::bpe(std::string_view piece, std::vector<int32_t>& out) const {
  if (piece.size() == 1) {
    out.push_back(byte_id[static_cast<unsigned char>(piece[0])]);
    return;
  }
  bool cacheable = piece.size() <= kCacheMaxPiece;
  if (cacheable) {
    std::shared_lock lock(cache_mutex);
    auto it = cache.find(std::string(piece));
    if (it != cache.end()) {
      out.insert(out.end(), it->second.begin(), it->second.end());
      return;
    }
  }
  size_t before = out.size();
  bpe_uncached(piece, out);
  if (cacheable) {
    std::vector<int32_t> ids(out.begin() + static_cast<std::ptrdiff_t>(before), out.end());
    std::unique_lock lock(cache_mutex);
    if (cache.size() >= kCacheMaxEntries) cache.clear();
    cache.emplace(std::string(piece), std::move(ids));
  }
}

void Tokenizer::Impl::bpe_uncached(std::string_view piece, std::vector<int32_t>& out) const {
  if (ignore_merges) {
    std::string sym;
    for (char c : piece) append_utf8(sym, byte_alphabet().to_cp[static_cast<unsigned char>(c)]);
    if (auto it = vocab.find(sym); it != vocab.end()) {
      out.push_back(it->second);
      return;
    }
  }
  size_t n = piece.size();
  std::vector<int32_t> ids(n);
  for (size_t i = 0; i < n; ++i) ids[i] = byte_id[static_cast<unsigned char>(piece[i])];
  auto rank_of = [&](int32_t a, int32_t b) {
    const MergeTable::Value* v = merges.find(a, b);
    return v ? v->rank : kNoRank;
  };
  if (n <= 128) {
    // Short words: keep the rank of every adjacent pair and merge the lowest rank, leftmost
    // first; only the two pairs next to a merge change.
    std::vector<int32_t> rank(n - 1);
    for (size_t i = 0; i + 1 < n; ++i) rank[i] = rank_of(ids[i], ids[i + 1]);
    while (ids.size() > 1) {
      size_t best = 0;
      for (size_t i = 1; i < rank.size(); ++i) {
        if (rank[i] < rank[best]) best = i;
      }
      if (rank[best] == kNoRank) break;
      ids[best] = merges.find(ids[best], ids[best + 1])->merged;
      ids.erase(ids.begin() + static_cast<std::ptrdiff_t>(best) + 1);
      rank.erase(rank.begin() + static_cast<std::ptrdiff_t>(best));
      if (best > 0) rank[best - 1] = rank_of(ids[best - 1], ids[best]);
      if (best < rank.size()) rank[best] = rank_of(ids[best], ids[best + 1]);
    }
    out.insert(out.end(), ids.begin(), ids.end());
    return;
  }
  // Long words: a linked list of symbols and a heap of candidate merges ordered by (rank,
  // position); stale entries are skipped when popped.
  std::vector<int64_t> prev(n), next(n);
  std::vector<bool> alive(n, true);
  for (size_t i = 0; i < n; ++i) {
    prev[i] = static_cast<int64_t>(i) - 1;
    next[i] = i + 1 < n ? static_cast<int64_t>(i + 1) : -1;
  }
  struct Cand {
    int32_t rank;
    int64_t pos;
    int32_t left, right;
    bool operator>(const Cand& o) const { return rank != o.rank ? rank > o.rank : pos > o.pos; }
  };
  std::priority_queue<Cand, std::vector<Cand>, std::greater<Cand>> heap;
  auto push = [&](int64_t i) {
    if (i < 0 || next[static_cast<size_t>(i)] < 0) return;
    int32_t a = ids[static_cast<size_t>(i)],
            b = ids[static_cast<size_t>(next[static_cast<size_t>(i)])];
    int32_t r = rank_of(a, b);
    if (r != kNoRank) heap.push({r, i, a, b});
  };
  for (size_t i = 0; i + 1 < n; ++i) push(static_cast<int64_t>(i));
  while (!heap.empty()) {
    Cand c = heap.top();
    heap.pop();
    auto i = static_cast<size_t>(c.pos);
    if (!alive[i] || next[i] < 0) continue;
    auto j = static_cast<size_t>(next[i]);
    if (ids[i] != c.left || ids[j] != c.right) continue;
    ids[i] = merges.find(c.left, c.right)->merged;
    alive[j] = false;
    next[i] = next[j];
    if (next[j] >= 0) prev[static_cast<size_t>(next[j])] = static_cast<int64_t>(i);
    push(prev[i]);
    push(static_cast<int64_t>(i));
  }
  for (int64_t i = 0; i >= 0; i = next[static_cast<size_t>(i)])
    out.push_back(ids[static_cast<size_t>(i)]);
}

// ---- public ----------------------------------------------------------------------------

Tokenizer::Tokenizer(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Tokenizer::Tokenizer(Tokenizer&&) noexcept = default;
Tokenizer& Tokenizer::operator=(Tokenizer&&) noexcept = default;
Tokenizer::~Tokenizer() = default;

Tokenizer Tokenizer::from_file(const std::string& path) {
  MappedFile file(path);
  return from_json(file.view(), path);
}

Tokenizer Tokenizer::from_json(std::string_view json_text, const std::string& source) {
  json root = json::parse(json_text.begin(), json_text.end(), nullptr, false);
  if (root.is_discarded()) fail(ErrorKind::kBadInput, "{}: not valid JSON", source);
  auto impl = std::make_unique<Impl>();
  impl->source = source;
  try {
    impl->load(root);
  } catch (const json::exception& e) {
    fail(ErrorKind::kBadInput, "{}: unexpected tokenizer.json structure ({})", source, e.what());
  }
  return Tokenizer(std::move(impl));
}

std::vector<int32_t> Tokenizer::encode(std::string_view text, bool allow_special) const {
  std::vector<int32_t> out;
  encode_into(text, allow_special, out);
  return out;
}

void Tokenizer::encode_into(std::string_view text, bool allow_special,
                            std::vector<int32_t>& out) const {
  validate_utf8(text, "the text to tokenize");
  const Impl& m = *impl_;
  if (!allow_special || m.added.empty()) {
    m.encode_normalized(m.nfc ? kev::nfc(text) : std::string(text), out);
    return;
  }
  if (!m.any_raw) {
    m.encode_plain(text, out);
    return;
  }
  m.split_added(text, m.raw_first, false, [&](const AddedToken* a, std::string_view piece) {
    if (a) {
      out.push_back(a->id);
    } else {
      m.encode_plain(piece, out);
    }
  });
}

std::string Tokenizer::decode(std::span<const int32_t> ids) const {
  const Impl& m = *impl_;
  const ByteAlphabet& alpha = byte_alphabet();
  std::string bytes;
  for (int32_t id : ids) {
    if (id < 0 || id >= m.size || (m.id_to_token[static_cast<size_t>(id)].empty())) {
      fail(ErrorKind::kBadInput, "token id {} is not in the tokenizer ({})", id, m.source);
    }
    const std::string& tok = m.id_to_token[static_cast<size_t>(id)];
    // A token whose every char is in the byte alphabet decodes to those bytes; any other
    // token (an added token with other text) contributes its own UTF-8, as the reference does.
    std::string mapped;
    bool all_mapped = true;
    for (size_t i = 0; i < tok.size();) {
      uint32_t cp = next_code_point(tok, i);
      auto it = alpha.to_byte.find(cp);
      if (it == alpha.to_byte.end()) {
        all_mapped = false;
        break;
      }
      mapped.push_back(static_cast<char>(it->second));
    }
    bytes += all_mapped ? mapped : tok;
  }
  return decode_lossy(bytes);
}

std::optional<int32_t> Tokenizer::token_id(std::string_view content) const {
  std::string key(content);
  if (auto it = impl_->added_by_content.find(key); it != impl_->added_by_content.end()) {
    return it->second;
  }
  if (auto it = impl_->vocab.find(key); it != impl_->vocab.end()) return it->second;
  return std::nullopt;
}

int32_t Tokenizer::vocab_size() const {
  return impl_->size;
}

const std::vector<AddedToken>& Tokenizer::added_tokens() const {
  return impl_->added;
}

}  // namespace kev
