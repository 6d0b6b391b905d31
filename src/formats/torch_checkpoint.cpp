// PyValue accessors and the torch.save writer (pickle protocol 2 + stored zip).
#include <bit>
#include <cstring>
#include <iterator>
#include <type_traits>
#include <variant>

#include "formats/pickle_names.h"
#include "formats/zip.h"
#include "kev/core/error.h"
#include "kev/core/file.h"
#include "kev/formats/torch_checkpoint.h"

namespace kev {

int64_t TorchTensor::numel() const {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

const PyDict* PyValue::as_dict() const {
  auto* d = std::get_if<std::shared_ptr<PyDict>>(&v);
  return d ? d->get() : nullptr;
}

const PyValue* PyValue::get(std::string_view key) const {
  const PyDict* d = as_dict();
  if (!d) return nullptr;
  for (const auto& [k, value] : *d) {
    const std::string* s = k.as_string();
    if (s && *s == key) return &value;
  }
  return nullptr;
}

const std::string* PyValue::as_string() const {
  return std::get_if<std::string>(&v);
}

const TorchTensor* PyValue::as_tensor() const {
  auto* t = std::get_if<std::shared_ptr<TorchTensor>>(&v);
  return t ? t->get() : nullptr;
}

std::optional<double> PyValue::as_number() const {
  if (auto* i = std::get_if<int64_t>(&v)) return static_cast<double>(*i);
  if (auto* f = std::get_if<double>(&v)) return *f;
  return std::nullopt;
}

static_assert(std::is_same_v<std::variant_alternative_t<kPythonDictIndex, decltype(PyValue::v)>,
                             std::shared_ptr<PyDict>> &&
              std::variant_size_v<decltype(PyValue::v)> == std::size(kPythonTypeNames) + 1);

std::string PyValue::type_name() const {
  const std::size_t i = v.index();
  if (i == kPythonDictIndex) return as_dict()->ordered ? "OrderedDict" : "dict";
  return i < std::size(kPythonTypeNames) ? kPythonTypeNames[i] : "tensor";
}

namespace {

const char* storage_class(DType d) {
  for (const StorageClass& c : kStorageClasses)
    if (c.dtype == d) return c.name;
  fail(ErrorKind::kUnsupported, "torch checkpoints cannot hold {} tensors", dtype_name(d));
}

// Emits pickle protocol 2 opcodes the way Python's pickler would (without the memo, which
// is optional for a reader).
class Pickler {
 public:
  std::string out = std::string("\x80\x02", 2);
  std::vector<std::pair<std::string, std::string>> storages;  // key -> bytes

  void value(const PyValue& x) {
    std::visit([this](const auto& a) { emit(a); }, x.v);
  }

 private:
  void op(char c) { out.push_back(c); }
  void u32(uint32_t v) {
    for (int i = 0; i < 4; ++i) out.push_back(static_cast<char>((v >> (8 * i)) & 0xff));
  }
  void emit(const PyValue::None&) { op('N'); }
  void emit(bool b) { op(b ? '\x88' : '\x89'); }
  void emit(int64_t i) {
    if (i >= 0 && i < 256) {
      op('K');
      out.push_back(static_cast<char>(i));
    } else if (i >= 0 && i < 65536) {
      op('M');
      out.push_back(static_cast<char>(i & 0xff));
      out.push_back(static_cast<char>(i >> 8));
    } else if (i >= INT32_MIN && i <= INT32_MAX) {
      op('J');
      u32(static_cast<uint32_t>(static_cast<int32_t>(i)));
    } else {  // LONG1: minimal two's complement little-endian
      std::string b;
      uint64_t u = static_cast<uint64_t>(i);
      for (int k = 0; k < 8; ++k) b.push_back(static_cast<char>((u >> (8 * k)) & 0xff));
      while (b.size() > 1) {
        char last = b.back(), prev = b[b.size() - 2];
        bool redundant = (last == 0 && !(prev & 0x80)) || (last == '\xff' && (prev & 0x80));
        if (!redundant) break;
        b.pop_back();
      }
      op('\x8a');
      out.push_back(static_cast<char>(b.size()));
      out += b;
    }
  }
  void emit(double d) {
    op('G');
    uint64_t u = std::bit_cast<uint64_t>(d);
    for (int k = 7; k >= 0; --k) out.push_back(static_cast<char>((u >> (8 * k)) & 0xff));
  }
  void emit(const std::string& s) {
    op('X');
    u32(static_cast<uint32_t>(s.size()));
    out += s;
  }
  void emit(const std::vector<uint8_t>& b) {  // protocol 2 spells bytes as _codecs.encode
    (void)b;
    fail(ErrorKind::kUnsupported, "writing bytes values into a torch checkpoint is not supported");
  }
  void emit(const PyList& l) {
    op(']');
    if (l.empty()) return;
    op('(');
    for (const auto& x : l) value(x);
    op('e');
  }
  void emit(const PyValue::Tuple& t) {
    if (t.items.empty()) return op(')');
    if (t.items.size() <= 3) {
      for (const auto& x : t.items) value(x);
      return op(static_cast<char>(0x84 + t.items.size()));
    }
    op('(');
    for (const auto& x : t.items) value(x);
    op('t');
  }
  void int_tuple(const std::vector<int64_t>& v) {
    if (v.empty()) return op(')');
    if (v.size() > 3) op('(');
    for (int64_t x : v) emit(x);
    op(v.size() > 3 ? 't' : static_cast<char>(0x84 + v.size()));
  }
  void ordered_dict_class() { out += "ccollections\nOrderedDict\n"; }
  void emit(const std::shared_ptr<PyDict>& d) {
    if (d->ordered) {
      ordered_dict_class();
      op(')');
      op('R');
    } else {
      op('}');
    }
    if (d->empty()) return;
    op('(');
    for (const auto& [k, x] : *d) {
      value(k);
      value(x);
    }
    op('u');
  }
  void emit(const std::shared_ptr<TorchTensor>& t) {
    size_t item = dtype_size(t->dtype);
    int64_t numel = t->numel();
    if (numel < 0 || t->bytes.size() != static_cast<uint64_t>(numel) * item)
      fail(ErrorKind::kInternal, "tensor bytes do not match its shape {}", shape_string(t->shape));
    std::string key = std::to_string(storages.size());
    storages.emplace_back(
        key, std::string(reinterpret_cast<const char*>(t->bytes.data()), t->bytes.size()));
    out += "ctorch._utils\n_rebuild_tensor_v2\n";
    op('(');
    op('(');  // persistent id ('storage', torch.<Type>Storage, key, 'cpu', numel)
    emit(std::string("storage"));
    out += std::string("ctorch\n") + storage_class(t->dtype) + "\n";
    emit(key);
    emit(std::string("cpu"));
    emit(numel);
    op('t');
    op('Q');
    emit(int64_t{0});
    std::vector<int64_t> stride(t->shape.size());
    int64_t s = 1;
    for (size_t i = t->shape.size(); i-- > 0;) {
      stride[i] = s;
      s *= t->shape[i];
    }
    int_tuple(t->shape);
    int_tuple(stride);
    emit(false);           // requires_grad
    ordered_dict_class();  // backward hooks: OrderedDict()
    op(')');
    op('R');
    op('t');
    op('R');
  }
};

}  // namespace

void write_torch_checkpoint(const std::string& path, const PyValue& root,
                            const std::string& archive_name) {
  if (archive_name.empty() || archive_name.find('/') != std::string::npos)
    fail(ErrorKind::kInternal, "bad torch archive name '{}'", archive_name);
  Pickler p;
  p.value(root);
  p.out.push_back('.');
  std::vector<std::pair<std::string, std::string>> entries;
  entries.emplace_back(archive_name + "/data.pkl", std::move(p.out));
  entries.emplace_back(archive_name + "/byteorder", "little");
  for (auto& [key, bytes] : p.storages)
    entries.emplace_back(archive_name + "/data/" + key, std::move(bytes));
  entries.emplace_back(archive_name + "/version", "3\n");
  std::string zip = build_stored_zip(entries, 64);
  OutputFile out(path);
  out.write(zip);
  out.close_synced();
}

}  // namespace kev
