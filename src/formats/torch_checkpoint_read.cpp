// The torch.save reader: a strict zip layer plus an allow-listed pickle interpreter that only
// ever builds data (it has no way to call anything but the tensor/OrderedDict rebuilds).
//
// Objects live in an arena indexed by uint32 ids, so memo aliasing, mutation after
// memoization and even cycles are harmless while interpreting; the conversion to PyValue at
// the end bounds depth (cycles and deep nesting are refused) and total size (shared
// sub-objects cannot blow up), and copies tensor bytes out of the archive.
#include <algorithm>
#include <bit>
#include <cstring>
#include <limits>
#include <unordered_map>

#include "formats/pickle_names.h"
#include "formats/zip.h"
#include "kev/core/error.h"
#include "kev/core/file.h"
#include "kev/formats/torch_checkpoint.h"

namespace kev {
namespace {

constexpr uint64_t kMaxPickleBytes = 64ull << 20;
constexpr size_t kMaxNodes = 4u << 20;
constexpr size_t kMaxConverted = 1u << 20;
constexpr int kMaxDepth = 100;
constexpr size_t kMaxDims = 64;

// The first nine in kPythonTypeNames' order (pickle_names.h).
enum class Kind : uint8_t {
  kNone,
  kBool,
  kInt,
  kFloat,
  kStr,
  kBytes,
  kList,
  kTuple,
  kDict,
  kGlobal,
  kStorage,
  kTensor
};
static_assert(static_cast<std::size_t>(Kind::kDict) == kPythonDictIndex &&
              static_cast<std::size_t>(Kind::kGlobal) == std::size(kPythonTypeNames));
enum class Global : uint8_t { kOrderedDict, kRebuildTensorV2, kRebuildParameter, kStorageType };

struct Node {
  Kind kind = Kind::kNone;
  bool flag = false;  // bool value; dict: is an OrderedDict
  Global global = Global::kOrderedDict;
  DType dtype = DType::kF32;  // kGlobal kStorageType
  int64_t i = 0;              // int value; kStorage/kTensor: index into storages_/tensors_
  double f = 0;
  std::string s;                // str / bytes
  std::vector<uint32_t> items;  // list/tuple items; dict keys and values interleaved
};

struct Storage {
  std::string key, location;
  DType dtype = DType::kF32;
  int64_t numel = 0;
  std::string_view bytes;
};

struct Tensor {
  uint32_t storage = 0;  // index into storages_
  int64_t offset = 0;
  std::vector<int64_t> size, stride;
};

std::string printable(std::string_view s) {
  std::string out;
  for (char c : s.substr(0, 80)) out.push_back(c >= 0x20 && c < 0x7f ? c : '?');
  if (s.size() > 80) out += "...";
  return out;
}

class Unpickler {
 public:
  Unpickler(std::string_view pickle, const ZipReader& zip, std::string root, std::string file,
            uint64_t budget)
      : p_(pickle),
        zip_(zip),
        root_(std::move(root)),
        file_(std::move(file)),
        byte_budget_(budget),
        initial_budget_(budget) {}

  PyValue run() {
    uint32_t result = interpret();
    return convert(result, 0);
  }

 private:
  std::string_view p_;
  size_t pos_ = 0, op_pos_ = 0;
  const ZipReader& zip_;
  std::string root_, file_;
  uint64_t byte_budget_;  // what is left
  const uint64_t initial_budget_;
  std::vector<Node> nodes_;
  std::vector<Storage> storages_;
  std::unordered_map<std::string, uint32_t> storage_by_key_;
  std::vector<Tensor> tensors_;
  std::vector<uint32_t> stack_;
  std::vector<size_t> marks_;
  std::unordered_map<uint64_t, uint32_t> memo_;
  // conversion state
  std::vector<uint8_t> visiting_;
  std::unordered_map<uint32_t, std::shared_ptr<PyDict>> dicts_;
  std::unordered_map<uint32_t, std::shared_ptr<TorchTensor>> tensor_values_;
  size_t converted_ = 0;

  template <typename... Args>
  [[noreturn]] void bad(fmt::format_string<Args...> f, Args&&... args) {
    fail(ErrorKind::kBadInput, "{}: {}/data.pkl: {} (pickle byte {}); refusing to load it", file_,
         root_, fmt::format(f, std::forward<Args>(args)...), op_pos_);
  }

  // ---- reading the opcode stream ----
  std::string_view take(uint64_t n) {
    if (n > p_.size() - pos_) bad("truncated pickle");
    std::string_view s = p_.substr(pos_, n);
    pos_ += n;
    return s;
  }
  uint64_t uint_le(int n) {
    std::string_view b = take(n);
    uint64_t v = 0;
    for (int k = n - 1; k >= 0; --k) v = (v << 8) | static_cast<uint8_t>(b[k]);
    return v;
  }
  std::string_view line() {
    size_t end = p_.find('\n', pos_);
    if (end == std::string_view::npos) bad("truncated pickle");
    std::string_view s = p_.substr(pos_, end - pos_);
    pos_ = end + 1;
    return s;
  }

  // ---- the arena and the stack ----
  uint32_t add(Node n) {
    if (nodes_.size() >= kMaxNodes) bad("too many objects");
    nodes_.push_back(std::move(n));
    return static_cast<uint32_t>(nodes_.size() - 1);
  }
  uint32_t add(Kind k) {
    Node n;
    n.kind = k;
    return add(std::move(n));
  }
  void push(uint32_t id) { stack_.push_back(id); }
  size_t floor() const { return marks_.empty() ? 0 : marks_.back(); }
  uint32_t pop() {
    if (stack_.size() <= floor()) bad("stack underflow");
    uint32_t id = stack_.back();
    stack_.pop_back();
    return id;
  }
  uint32_t top() {
    if (stack_.size() <= floor()) bad("stack underflow");
    return stack_.back();
  }
  std::vector<uint32_t> pop_mark() {
    if (marks_.empty()) bad("no MARK on the stack");
    size_t m = marks_.back();
    marks_.pop_back();
    std::vector<uint32_t> items(stack_.begin() + static_cast<ptrdiff_t>(m), stack_.end());
    stack_.resize(m);
    return items;
  }
  Node& node(uint32_t id) { return nodes_[id]; }
  const char* kind_name(uint32_t id) {
    const auto k = static_cast<std::size_t>(node(id).kind);
    if (k == kPythonDictIndex) return node(id).flag ? "OrderedDict" : "dict";
    if (k < std::size(kPythonTypeNames)) return kPythonTypeNames[k];
    switch (node(id).kind) {
      case Kind::kGlobal:
        return "a class or function";
      case Kind::kStorage:
        return "storage";
      default:
        return "tensor";
    }
  }
  uint32_t expect(uint32_t id, Kind k, const char* what) {
    if (node(id).kind != k) bad("{} is a {}", what, kind_name(id));
    return id;
  }

  uint32_t int_node(int64_t v) {
    Node n;
    n.kind = Kind::kInt;
    n.i = v;
    return add(std::move(n));
  }
  uint32_t str_node(Kind k, std::string_view s) {
    Node n;
    n.kind = k;
    n.s = std::string(s);
    return add(std::move(n));
  }
  uint32_t tuple_node(std::vector<uint32_t> items) {
    Node n;
    n.kind = Kind::kTuple;
    n.items = std::move(items);
    return add(std::move(n));
  }

  void set_items(uint32_t dict, const std::vector<uint32_t>& kv) {
    if (node(dict).kind != Kind::kDict) bad("SETITEM(S) on a {}", kind_name(dict));
    if (kv.size() % 2) bad("SETITEMS with an odd number of items");
    for (size_t j = 0; j < kv.size(); j += 2) {
      Kind kk = node(kv[j]).kind;
      if (kk != Kind::kStr && kk != Kind::kInt && kk != Kind::kBool && kk != Kind::kNone &&
          kk != Kind::kFloat && kk != Kind::kBytes)
        bad("a dict key is a {}", kind_name(kv[j]));
    }
    auto& items = node(dict).items;
    items.insert(items.end(), kv.begin(), kv.end());
  }

  uint32_t resolve_global(std::string_view module, std::string_view name) {
    Node n;
    n.kind = Kind::kGlobal;
    if (module == "collections" && name == "OrderedDict") {
      n.global = Global::kOrderedDict;
    } else if (module == "torch._utils" && name == "_rebuild_tensor_v2") {
      n.global = Global::kRebuildTensorV2;
    } else if (module == "torch._utils" && name == "_rebuild_parameter") {
      n.global = Global::kRebuildParameter;
    } else {
      bool found = false;
      if (module == "torch")
        for (const auto& c : kStorageClasses)
          if (name == c.name) {
            n.global = Global::kStorageType;
            n.dtype = c.dtype;
            found = true;
          }
      if (!found)
        bad("refers to the global {}.{}, which is not allowed (only collections.OrderedDict, "
            "torch._utils._rebuild_tensor_v2, torch._utils._rebuild_parameter and torch.*Storage "
            "are)",
            printable(module), printable(name));
    }
    return add(std::move(n));
  }

  // ('storage', torch.<Type>Storage, key, location, numel)
  uint32_t persistent_load(uint32_t pid) {
    const Node& t = node(pid);
    if (t.kind != Kind::kTuple || t.items.size() != 5)
      bad("persistent id is not a 5-tuple ('storage', ...)");
    const Node& tag = node(t.items[0]);
    const Node& type = node(t.items[1]);
    const Node& key = node(t.items[2]);
    const Node& location = node(t.items[3]);
    const Node& numel = node(t.items[4]);
    if (tag.kind != Kind::kStr || tag.s != "storage")
      bad("persistent id is not a 'storage' reference");
    if (type.kind != Kind::kGlobal || type.global != Global::kStorageType)
      bad("persistent id's storage type is not a torch.*Storage class");
    if (key.kind != Kind::kStr || location.kind != Kind::kStr || numel.kind != Kind::kInt ||
        numel.i < 0)
      bad("malformed storage reference");
    auto it = storage_by_key_.find(key.s);
    if (it != storage_by_key_.end()) {
      const Storage& s = storages_[it->second];
      if (s.dtype != type.dtype || s.numel != numel.i)
        bad("storage {} is referenced with two different types or sizes", printable(key.s));
    } else {
      std::string record = root_ + "/data/" + key.s;
      const ZipEntry* e = zip_.find(record);
      if (!e) bad("storage {} has no record {}", printable(key.s), printable(record));
      uint64_t item = dtype_size(type.dtype);
      if (static_cast<uint64_t>(numel.i) > std::numeric_limits<uint64_t>::max() / item ||
          e->size != static_cast<uint64_t>(numel.i) * item)
        bad("storage {} holds {} bytes, but {} elements of {} were declared", printable(key.s),
            e->size, numel.i, dtype_name(type.dtype));
      Storage s{key.s, location.s, type.dtype, numel.i, zip_.read(*e)};
      storages_.push_back(std::move(s));
      it = storage_by_key_.emplace(key.s, static_cast<uint32_t>(storages_.size() - 1)).first;
    }
    Node n;
    n.kind = Kind::kStorage;
    n.i = it->second;
    return add(std::move(n));
  }

  std::vector<int64_t> int_tuple(uint32_t id, const char* what) {
    const Node& t = node(id);
    if (t.kind != Kind::kTuple) bad("tensor {} is a {}", what, kind_name(id));
    if (t.items.size() > kMaxDims) bad("tensor has more than {} dimensions", kMaxDims);
    std::vector<int64_t> out;
    for (uint32_t x : t.items) {
      if (node(x).kind != Kind::kInt || node(x).i < 0)
        bad("tensor {} holds a non-integer or negative entry", what);
      out.push_back(node(x).i);
    }
    return out;
  }

  uint32_t rebuild_tensor(const std::vector<uint32_t>& args) {
    if (args.size() != 6 && args.size() != 7)
      bad("_rebuild_tensor_v2 takes 6 or 7 arguments, got {}", args.size());
    expect(args[0], Kind::kStorage, "_rebuild_tensor_v2's storage");
    expect(args[1], Kind::kInt, "_rebuild_tensor_v2's storage offset");
    expect(args[4], Kind::kBool, "_rebuild_tensor_v2's requires_grad");
    expect(args[5], Kind::kDict, "_rebuild_tensor_v2's backward hooks");
    if (!node(args[5]).items.empty()) bad("tensor has backward hooks");
    if (args.size() == 7 && node(args[6]).kind != Kind::kNone && node(args[6]).kind != Kind::kDict)
      bad("_rebuild_tensor_v2's metadata is a {}", kind_name(args[6]));
    Tensor t;
    t.storage = static_cast<uint32_t>(node(args[0]).i);
    t.offset = node(args[1]).i;
    t.size = int_tuple(args[2], "size");
    t.stride = int_tuple(args[3], "stride");
    if (t.offset < 0) bad("negative storage offset");
    if (t.size.size() != t.stride.size()) bad("tensor size and stride have different lengths");
    const Storage& s = storages_[t.storage];
    // Every element the view can reach must lie inside the storage.
    int64_t numel = 1, last = t.offset, span = 0;
    for (size_t d = 0; d < t.size.size(); ++d)
      if (__builtin_mul_overflow(numel, t.size[d], &numel) || numel > (int64_t{1} << 50))
        bad("tensor is too large");
    if (numel > 0) {
      for (size_t d = 0; d < t.size.size(); ++d)
        if (__builtin_mul_overflow(t.size[d] - 1, t.stride[d], &span) ||
            __builtin_add_overflow(last, span, &last))
          bad("tensor view overflows (size {}, stride {})", shape_string(t.size),
              shape_string(t.stride));
      if (last >= s.numel)
        bad("tensor view (offset {}, size {}, stride {}) reaches past storage {} of {} elements",
            t.offset, shape_string(t.size), shape_string(t.stride), printable(s.key), s.numel);
    }
    tensors_.push_back(std::move(t));
    Node n;
    n.kind = Kind::kTensor;
    n.i = static_cast<int64_t>(tensors_.size() - 1);
    return add(std::move(n));
  }

  uint32_t call(uint32_t callable, uint32_t args_id, const char* how) {
    if (node(callable).kind != Kind::kGlobal) bad("{} of a {}", how, kind_name(callable));
    if (node(args_id).kind != Kind::kTuple) bad("{} arguments are a {}", how, kind_name(args_id));
    std::vector<uint32_t> args = node(args_id).items;
    switch (node(callable).global) {
      case Global::kOrderedDict: {
        if (!args.empty()) bad("OrderedDict called with arguments");
        Node n;
        n.kind = Kind::kDict;
        n.flag = true;
        return add(std::move(n));
      }
      case Global::kRebuildTensorV2:
        if (std::string_view(how) != "REDUCE") break;
        return rebuild_tensor(args);
      case Global::kRebuildParameter:
        if (std::string_view(how) != "REDUCE") break;
        if (args.size() != 3) bad("_rebuild_parameter takes 3 arguments, got {}", args.size());
        expect(args[0], Kind::kTensor, "_rebuild_parameter's data");
        expect(args[1], Kind::kBool, "_rebuild_parameter's requires_grad");
        expect(args[2], Kind::kDict, "_rebuild_parameter's backward hooks");
        if (!node(args[2]).items.empty()) bad("parameter has backward hooks");
        return args[0];
      case Global::kStorageType:
        break;
    }
    bad("{} of a disallowed callable", how);
  }

  uint32_t interpret() {
    if (p_.size() > kMaxPickleBytes) bad("data.pkl is larger than {} bytes", kMaxPickleBytes);
    for (;;) {
      op_pos_ = pos_;
      if (pos_ >= p_.size()) bad("truncated pickle (no STOP)");
      const uint8_t op = static_cast<uint8_t>(p_[pos_++]);
      switch (op) {
        case 0x80: {  // PROTO
          uint64_t v = uint_le(1);
          if (v < 2 || v > 5) bad("pickle protocol {} is not supported", v);
          break;
        }
        case 0x95:  // FRAME: framing is advisory for a reader of the whole stream
          if (uint_le(8) > p_.size() - pos_) bad("frame longer than the pickle");
          break;
        case '.': {  // STOP
          if (!marks_.empty() || stack_.size() != 1)
            bad("STOP with {} objects on the stack", stack_.size());
          if (pos_ != p_.size()) bad("bytes after STOP");
          return stack_.back();
        }
        case '(':
          marks_.push_back(stack_.size());
          break;
        case '0':
          pop();
          break;
        case '1':
          pop_mark();
          break;
        case '2':
          push(top());
          break;
        case 'N':
          push(add(Kind::kNone));
          break;
        case 0x88:
        case 0x89: {
          Node n;
          n.kind = Kind::kBool;
          n.flag = op == 0x88;
          push(add(std::move(n)));
          break;
        }
        case 'J':
          push(int_node(static_cast<int32_t>(static_cast<uint32_t>(uint_le(4)))));
          break;
        case 'K':
          push(int_node(static_cast<int64_t>(uint_le(1))));
          break;
        case 'M':
          push(int_node(static_cast<int64_t>(uint_le(2))));
          break;
        case 0x8a:    // LONG1
        case 0x8b: {  // LONG4
          uint64_t n = uint_le(op == 0x8a ? 1 : 4);
          if (n > 8) bad("integer wider than 64 bits");
          std::string_view b = take(n);
          uint64_t v = 0;
          for (size_t k = n; k-- > 0;) v = (v << 8) | static_cast<uint8_t>(b[k]);
          if (n > 0 && n < 8 && (static_cast<uint8_t>(b[n - 1]) & 0x80))
            v |= ~uint64_t{0} << (8 * n);
          push(int_node(static_cast<int64_t>(v)));
          break;
        }
        case 'G': {
          uint64_t bits = 0;
          for (char c : take(8)) bits = (bits << 8) | static_cast<uint8_t>(c);
          Node n;
          n.kind = Kind::kFloat;
          n.f = std::bit_cast<double>(bits);
          push(add(std::move(n)));
          break;
        }
        case 'X':
          push(str_node(Kind::kStr, take(uint_le(4))));
          break;
        case 0x8c:
          push(str_node(Kind::kStr, take(uint_le(1))));
          break;
        case 0x8d:
          push(str_node(Kind::kStr, take(uint_le(8))));
          break;
        case 'B':
          push(str_node(Kind::kBytes, take(uint_le(4))));
          break;
        case 'C':
          push(str_node(Kind::kBytes, take(uint_le(1))));
          break;
        case 0x8e:
        case 0x96:
          push(str_node(Kind::kBytes, take(uint_le(8))));
          break;
        case ')':
          push(tuple_node({}));
          break;
        case 0x85:
        case 0x86:
        case 0x87: {
          size_t n = op - 0x84u;
          std::vector<uint32_t> items(n);
          for (size_t k = n; k-- > 0;) items[k] = pop();
          push(tuple_node(std::move(items)));
          break;
        }
        case 't':
          push(tuple_node(pop_mark()));
          break;
        case ']':
          push(add(Kind::kList));
          break;
        case 'l': {
          Node n;
          n.kind = Kind::kList;
          n.items = pop_mark();
          push(add(std::move(n)));
          break;
        }
        case 'a': {
          uint32_t x = pop();
          uint32_t list = top();
          if (node(list).kind != Kind::kList) bad("APPEND to a {}", kind_name(list));
          node(list).items.push_back(x);
          break;
        }
        case 'e': {
          std::vector<uint32_t> xs = pop_mark();
          uint32_t list = top();
          if (node(list).kind != Kind::kList) bad("APPENDS to a {}", kind_name(list));
          auto& items = node(list).items;
          items.insert(items.end(), xs.begin(), xs.end());
          break;
        }
        case '}':
          push(add(Kind::kDict));
          break;
        case 'd': {
          std::vector<uint32_t> kv = pop_mark();
          uint32_t dict = add(Kind::kDict);
          set_items(dict, kv);
          push(dict);
          break;
        }
        case 's': {
          uint32_t v = pop(), k = pop();
          set_items(top(), {k, v});
          break;
        }
        case 'u': {
          std::vector<uint32_t> kv = pop_mark();
          set_items(top(), kv);
          break;
        }
        case 'q':
          memo_[uint_le(1)] = top();
          break;
        case 'r':
          memo_[uint_le(4)] = top();
          break;
        case 0x94: {
          uint64_t index = memo_.size();
          memo_[index] = top();
          break;
        }
        case 'h':
        case 'j': {
          uint64_t index = uint_le(op == 'h' ? 1 : 4);
          auto it = memo_.find(index);
          if (it == memo_.end()) bad("memo entry {} is read before it is written", index);
          push(it->second);
          break;
        }
        case 'c': {
          std::string_view module = line();
          std::string_view name = line();
          push(resolve_global(module, name));
          break;
        }
        case 0x93: {  // STACK_GLOBAL
          uint32_t name = pop(), module = pop();
          if (node(name).kind != Kind::kStr || node(module).kind != Kind::kStr)
            bad("STACK_GLOBAL of non-strings");
          push(resolve_global(node(module).s, node(name).s));
          break;
        }
        case 'R': {
          uint32_t args = pop(), callable = pop();
          push(call(callable, args, "REDUCE"));
          break;
        }
        case 0x81: {  // NEWOBJ
          uint32_t args = pop(), cls = pop();
          push(call(cls, args, "NEWOBJ"));
          break;
        }
        case 'Q':
          push(persistent_load(pop()));
          break;
        case 'b': {  // BUILD: only an OrderedDict's attribute dict (e.g. state_dict _metadata)
          uint32_t state = pop();
          uint32_t target = top();
          if (node(target).kind != Kind::kDict || !node(target).flag)
            bad("BUILD on a {}", kind_name(target));
          if (node(state).kind != Kind::kDict && node(state).kind != Kind::kNone)
            bad("BUILD with a {} state", kind_name(state));
          break;  // attributes are not part of the data
        }
        default:
          bad("unsupported pickle opcode 0x{:02x}", op);
      }
    }
  }

  // ---- conversion to PyValue ----
  // Every byte the conversion allocates (tensor data, and str/bytes/list copies, which are
  // repeated for each shared reference) comes out of one budget sized from the file.
  void charge(uint64_t bytes) {
    if (bytes > byte_budget_)
      bad("tensors, strings and lists add up to more than {} bytes after expanding shared "
          "references",
          initial_budget_);
    byte_budget_ -= bytes;
  }

  PyValue convert(uint32_t id, int depth) {
    if (depth > kMaxDepth) bad("objects nested deeper than {} levels (or a cycle)", kMaxDepth);
    if (++converted_ > kMaxConverted)
      bad("more than {} objects after expanding shared references", kMaxConverted);
    const Node& n = node(id);
    switch (n.kind) {
      case Kind::kNone:
        return PyValue{};
      case Kind::kBool:
        return PyValue{n.flag};
      case Kind::kInt:
        return PyValue{n.i};
      case Kind::kFloat:
        return PyValue{n.f};
      case Kind::kStr:
        charge(n.s.size());  // every reference is a copy
        return PyValue{n.s};
      case Kind::kBytes:
        charge(n.s.size());
        return PyValue{std::vector<uint8_t>(n.s.begin(), n.s.end())};
      case Kind::kList:
      case Kind::kTuple: {
        charge(n.items.size() * sizeof(PyValue));
        PyList items;
        items.reserve(std::min<size_t>(n.items.size(), 1 << 16));
        for (size_t k = 0; k < node(id).items.size(); ++k)
          items.push_back(convert(node(id).items[k], depth + 1));
        if (node(id).kind == Kind::kList) return PyValue{std::move(items)};
        return PyValue{PyValue::Tuple{std::move(items)}};
      }
      case Kind::kDict:
        return PyValue{convert_dict(id, depth)};
      case Kind::kTensor:
        return PyValue{materialize(id)};
      case Kind::kGlobal:
        bad("a class or function is part of the data");
      case Kind::kStorage:
        bad("a bare storage is part of the data");
    }
    bad("unknown object");
  }

  std::shared_ptr<PyDict> convert_dict(uint32_t id, int depth) {
    if (auto it = dicts_.find(id); it != dicts_.end()) return it->second;
    if (visiting_.size() < nodes_.size()) visiting_.resize(nodes_.size());
    if (visiting_[id]) bad("a dict contains itself");
    visiting_[id] = 1;
    auto d = std::make_shared<PyDict>();
    d->ordered = node(id).flag;
    std::unordered_map<std::string, size_t>
        index;  // Python semantics: a repeated key keeps its slot
    for (size_t k = 0; k + 1 < node(id).items.size(); k += 2) {
      PyValue key = convert(node(id).items[k], depth + 1);
      PyValue value = convert(node(id).items[k + 1], depth + 1);
      std::string tag = std::to_string(key.v.index()) + ":";
      if (const auto* s = key.as_string())
        tag += *s;
      else if (const auto* i = std::get_if<int64_t>(&key.v))
        tag += std::to_string(*i);
      else if (const auto* b = std::get_if<bool>(&key.v))
        tag += *b ? "1" : "0";
      else if (const auto* f = std::get_if<double>(&key.v))
        tag += std::to_string(std::bit_cast<uint64_t>(*f));
      else if (const auto* by = std::get_if<std::vector<uint8_t>>(&key.v))
        tag.append(by->begin(), by->end());
      auto [it, fresh] = index.emplace(tag, d->size());
      if (fresh) {
        d->emplace_back(std::move(key), std::move(value));
      } else {
        (*d)[it->second].second = std::move(value);
      }
    }
    visiting_[id] = 0;
    dicts_[id] = d;
    return d;
  }

  std::shared_ptr<TorchTensor> materialize(uint32_t id) {
    if (auto it = tensor_values_.find(id); it != tensor_values_.end()) return it->second;
    const Tensor& t = tensors_[static_cast<size_t>(node(id).i)];
    const Storage& s = storages_[t.storage];
    auto out = std::make_shared<TorchTensor>();
    out->dtype = s.dtype;
    out->shape = t.size;
    out->strides = t.stride;
    out->storage_offset = t.offset;
    out->storage_key = s.key;
    out->location = s.location;
    const size_t item = dtype_size(s.dtype);
    const uint64_t numel = static_cast<uint64_t>(out->numel());  // bounded by rebuild_tensor
    if (numel > byte_budget_ / item) charge(std::numeric_limits<uint64_t>::max());
    charge(numel * item);
    out->bytes.resize(numel * item);
    if (numel) copy_view(t, s, item, out->bytes.data());
    tensor_values_[id] = out;
    return out;
  }

  // Copies a strided view into contiguous row-major order (extents checked at rebuild).
  static void copy_view(const Tensor& t, const Storage& s, size_t item, uint8_t* dst) {
    const size_t dims = t.size.size();
    // Fold trailing dimensions that are already contiguous into one block.
    int64_t block = 1;
    size_t d = dims;
    while (d > 0 && t.stride[d - 1] == block) block *= t.size[--d];
    const uint8_t* base = reinterpret_cast<const uint8_t*>(s.bytes.data());
    std::vector<int64_t> index(d, 0);
    const size_t block_bytes = static_cast<size_t>(block) * item;
    for (;;) {
      int64_t at = t.offset;
      for (size_t k = 0; k < d; ++k) at += index[k] * t.stride[k];
      std::memcpy(dst, base + static_cast<size_t>(at) * item, block_bytes);
      dst += block_bytes;
      size_t k = d;
      while (k > 0 && ++index[k - 1] == t.size[k - 1]) index[--k] = 0;
      if (k == 0) return;
    }
  }
};

}  // namespace

PyValue read_torch_checkpoint_bytes(const std::string& bytes, const std::string& file) {
  ZipReader zip(bytes, file);
  std::string root;
  for (const auto& e : zip.entries()) {
    const std::string_view name = e.name;
    size_t slash = name.find('/');
    if (slash != std::string_view::npos && slash > 0 && name.substr(slash) == "/data.pkl") {
      if (!root.empty()) fail(ErrorKind::kBadInput, "{}: more than one data.pkl record", file);
      root = std::string(name.substr(0, slash));
    }
  }
  if (root.empty())
    fail(ErrorKind::kBadInput,
         "{} is not a torch.save archive: no <name>/data.pkl record (legacy pre-1.6 "
         "checkpoints are not supported)",
         file);
  for (const auto& e : zip.entries())
    if (e.name.compare(0, root.size() + 1, root + "/") != 0)
      fail(ErrorKind::kBadInput, "{}: record {} is outside the archive's root {}", file,
           printable(e.name), root);
  const ZipEntry* version = zip.find(root + "/version");
  if (!version) version = zip.find(root + "/.data/version");
  if (!version) fail(ErrorKind::kBadInput, "{}: no {}/version record", file, root);
  std::string_view v = zip.read(*version);
  if (!v.empty() && v.back() == '\n') v.remove_suffix(1);
  if (v.empty() || v.size() > 3 ||
      !std::all_of(v.begin(), v.end(), [](char c) { return c >= '0' && c <= '9'; }))
    fail(ErrorKind::kBadInput, "{}: malformed {}/version record", file, root);
  int version_number = std::stoi(std::string(v));
  if (version_number < 1 || version_number > 10)
    fail(ErrorKind::kUnsupported, "{}: archive format version {} is not supported", file,
         version_number);
  if (const ZipEntry* order = zip.find(root + "/byteorder")) {
    std::string_view o = zip.read(*order);
    if (o != "little")
      fail(ErrorKind::kUnsupported, "{}: byte order '{}' is not supported (only little-endian)",
           file, printable(o));
  }
  const ZipEntry* pickle = zip.find(root + "/data.pkl");
  // Tensors may be views that repeat storage bytes; bound what a small file can make us allocate.
  const uint64_t budget = 8 * static_cast<uint64_t>(bytes.size()) + (64u << 20);
  Unpickler u(zip.read(*pickle), zip, root, file, budget);
  return u.run();
}

PyValue read_torch_checkpoint(const std::string& path) {
  MappedFile f(path);
  return read_torch_checkpoint_bytes(std::string(f.view()), path);
}

}  // namespace kev
