#include "kev/formats/safetensors.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cstring>
#include <set>

#include "kev/core/error.h"

namespace kev {
namespace {

struct DTypeEntry {
  DType dtype;
  const char* name;
  size_t size;
};

constexpr DTypeEntry kDTypes[] = {
    {DType::kF64, "F64", 8},   {DType::kF32, "F32", 4},        {DType::kF16, "F16", 2},
    {DType::kBF16, "BF16", 2}, {DType::kI64, "I64", 8},        {DType::kI32, "I32", 4},
    {DType::kI16, "I16", 2},   {DType::kI8, "I8", 1},          {DType::kU8, "U8", 1},
    {DType::kBool, "BOOL", 1}, {DType::kU16, "U16", 2},        {DType::kU32, "U32", 4},
    {DType::kU64, "U64", 8},   {DType::kF8E4M3, "F8_E4M3", 1}, {DType::kF8E5M2, "F8_E5M2", 1},
};

constexpr uint64_t kMaxHeader = 100u << 20;

const DTypeEntry& entry(DType d) {
  for (const auto& e : kDTypes)
    if (e.dtype == d) return e;
  fail(ErrorKind::kInternal, "unknown dtype enum");
}

uint64_t read_u64_le(const char* p) {
  uint64_t v = 0;
  for (int i = 7; i >= 0; --i) v = (v << 8) | static_cast<uint8_t>(p[i]);
  return v;
}

}  // namespace

size_t dtype_size(DType d) {
  return entry(d).size;
}
const char* dtype_name(DType d) {
  return entry(d).name;
}

std::optional<DType> parse_dtype(std::string_view name) {
  for (const auto& e : kDTypes)
    if (name == e.name) return e.dtype;
  return std::nullopt;
}

int64_t TensorInfo::numel() const {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

std::string shape_string(const std::vector<int64_t>& shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + "]";
}

SafetensorsHeader parse_safetensors(std::string_view bytes, const std::string& file) {
  using nlohmann::json;
  if (bytes.size() < 8)
    fail(ErrorKind::kBadInput, "{} is not a safetensors file: shorter than 8 bytes", file);
  uint64_t n = read_u64_le(bytes.data());
  if (n > kMaxHeader || n > bytes.size() - 8)
    fail(ErrorKind::kBadInput,
         "{} is not a valid safetensors file: header length {} exceeds the file", file, n);
  std::string_view text = bytes.substr(8, n);
  if (text.empty() || text[0] != '{')
    fail(ErrorKind::kBadInput, "{} is not a valid safetensors file: header is not a JSON object",
         file);

  // Duplicate top-level names would let two different tensors hide behind one name.
  std::set<std::string> seen;
  std::string duplicate;
  // The format nests at most {name: {"shape": [...]}}: containers open at depth 0 (the
  // header), 1 (a tensor / __metadata__) and 2 (shape, data_offsets). Deeper containers are
  // discarded as they are parsed and refused below, so no deep tree is ever built (printing or
  // walking one recursively would overflow the stack).
  bool too_deep = false;
  json::parser_callback_t track = [&](int depth, json::parse_event_t event, json& parsed) {
    if (event == json::parse_event_t::key && depth == 1) {
      const auto& k = parsed.get_ref<const std::string&>();
      if (!seen.insert(k).second && duplicate.empty()) duplicate = k;
    }
    if ((event == json::parse_event_t::object_start || event == json::parse_event_t::array_start) &&
        depth > 2) {
      too_deep = true;
      return false;
    }
    return true;
  };
  json header = json::parse(text.begin(), text.end(), track, /*allow_exceptions=*/false);
  if (header.is_discarded() || !header.is_object())
    fail(ErrorKind::kBadInput, "{} is not a valid safetensors file: header is not valid JSON",
         file);
  if (too_deep)
    fail(ErrorKind::kBadInput,
         "{} is not a valid safetensors file: the header nests lists or objects deeper than the "
         "format allows (3 levels)",
         file);
  if (!duplicate.empty())
    fail(ErrorKind::kBadInput, "{}: tensor name '{}' appears twice in the header", file, duplicate);

  SafetensorsHeader out;
  out.data_start = 8 + n;
  const uint64_t data_size = bytes.size() - out.data_start;
  for (auto it = header.begin(); it != header.end(); ++it) {
    const std::string& name = it.key();
    const json& v = it.value();
    if (name == "__metadata__") {
      if (!v.is_object()) fail(ErrorKind::kBadInput, "{}: __metadata__ must be an object", file);
      for (auto m = v.begin(); m != v.end(); ++m) {
        if (!m.value().is_string())
          fail(ErrorKind::kBadInput, "{}: __metadata__ value '{}' must be a string", file, m.key());
        out.metadata[m.key()] = m.value().get<std::string>();
      }
      continue;
    }
    if (!v.is_object() || !v.contains("dtype") || !v.contains("shape") ||
        !v.contains("data_offsets"))
      fail(ErrorKind::kBadInput, "{}: tensor '{}' needs dtype, shape and data_offsets", file, name);
    TensorInfo t;
    t.name = name;
    const json& dt = v["dtype"];
    auto dtype = dt.is_string() ? parse_dtype(dt.get_ref<const std::string&>()) : std::nullopt;
    if (!dtype)
      fail(ErrorKind::kBadInput, "{}: tensor '{}' has an unknown dtype {}", file, name,
           dt.is_primitive() ? dt.dump() : dt.type_name());
    t.dtype = *dtype;
    const json& shape = v["shape"];
    if (!shape.is_array())
      fail(ErrorKind::kBadInput, "{}: tensor '{}' shape is not a list", file, name);
    uint64_t numel = 1;
    for (const json& d : shape) {
      if (!d.is_number_unsigned())
        fail(ErrorKind::kBadInput, "{}: tensor '{}' has an invalid dimension {}", file, name,
             d.is_primitive() ? d.dump() : d.type_name());
      uint64_t dim = d.get<uint64_t>();
      if (dim > (uint64_t{1} << 48))
        fail(ErrorKind::kBadInput, "{}: tensor '{}' dimension {} is too large", file, name, dim);
      if (__builtin_mul_overflow(numel, dim, &numel) || numel > (uint64_t{1} << 62))
        fail(ErrorKind::kBadInput, "{}: tensor '{}' has too many elements", file, name);
      t.shape.push_back(static_cast<int64_t>(dim));
    }
    const json& off = v["data_offsets"];
    if (!off.is_array() || off.size() != 2 || !off[0].is_number_unsigned() ||
        !off[1].is_number_unsigned())
      fail(ErrorKind::kBadInput, "{}: tensor '{}' data_offsets must be two non-negative integers",
           file, name);
    uint64_t begin = off[0].get<uint64_t>(), end = off[1].get<uint64_t>();
    if (begin > end || end > data_size)
      fail(ErrorKind::kBadInput,
           "{}: tensor '{}' data_offsets [{}, {}] lie outside the {}-byte data region (truncated "
           "file?)",
           file, name, begin, end, data_size);
    uint64_t expect = numel * dtype_size(t.dtype);  // exact while numel <= 2^60 (sizes <= 8)
    if (numel > (uint64_t{1} << 60)) expect = UINT64_MAX;
    if (expect != end - begin)
      fail(ErrorKind::kBadInput, "{}: tensor '{}' {} {} needs {} bytes but data_offsets give {}",
           file, name, dtype_name(t.dtype), shape_string(t.shape), expect, end - begin);
    t.offset = begin;
    t.nbytes = end - begin;
    out.tensors.push_back(std::move(t));
  }
  std::sort(out.tensors.begin(), out.tensors.end(), [](const TensorInfo& a, const TensorInfo& b) {
    return a.offset != b.offset ? a.offset < b.offset : a.nbytes < b.nbytes;
  });
  uint64_t cursor = 0;
  for (const auto& t : out.tensors) {
    if (t.offset != cursor)
      fail(ErrorKind::kBadInput,
           "{}: tensor '{}' starts at byte {} but the previous tensor ends at {} (overlap or hole)",
           file, t.name, t.offset, cursor);
    cursor = t.offset + t.nbytes;
  }
  if (cursor != data_size)
    fail(ErrorKind::kBadInput,
         "{}: tensors cover {} bytes but the data region has {} (truncated or padded file)", file,
         cursor, data_size);
  return out;
}

SafetensorsView::SafetensorsView(std::string_view bytes, std::string name)
    : bytes_(bytes), name_(std::move(name)), header_(parse_safetensors(bytes, name_)) {
  for (size_t i = 0; i < header_.tensors.size(); ++i) by_name_[header_.tensors[i].name] = i;
}

const TensorInfo* SafetensorsView::find(std::string_view name) const {
  auto it = by_name_.find(name);
  return it == by_name_.end() ? nullptr : &header_.tensors[it->second];
}

const TensorInfo& SafetensorsView::get(std::string_view name) const {
  if (const TensorInfo* t = find(name)) return *t;
  fail(ErrorKind::kBadInput, "{} has no tensor named '{}'", name_, name);
}

uint64_t TensorSpec::nbytes() const {
  uint64_t n = dtype_size(dtype);
  for (int64_t d : shape) n *= static_cast<uint64_t>(d);
  return n;
}

std::string safetensors_header_bytes(const std::vector<TensorSpec>& specs,
                                     const std::map<std::string, std::string>& metadata) {
  // Written by hand (not via nlohmann's sorted object) so the order is the caller's.
  std::string json = "{";
  if (!metadata.empty()) json += "\"__metadata__\":" + nlohmann::json(metadata).dump();
  uint64_t offset = 0;
  for (const auto& s : specs) {
    if (json.size() > 1) json += ",";
    nlohmann::json shape = s.shape;
    uint64_t end = offset + s.nbytes();
    json += nlohmann::json(s.name).dump() + ":{\"dtype\":\"" + dtype_name(s.dtype) +
            "\",\"shape\":" + shape.dump() + ",\"data_offsets\":[" + std::to_string(offset) + "," +
            std::to_string(end) + "]}";
    offset = end;
  }
  json += "}";
  while ((json.size() + 8) % 8 != 0) json += ' ';
  std::string out(8, '\0');
  uint64_t n = json.size();
  for (int i = 0; i < 8; ++i) out[i] = static_cast<char>((n >> (8 * i)) & 0xff);
  return out + json;
}

SafetensorsWriter::SafetensorsWriter(const std::string& path, std::vector<TensorSpec> specs,
                                     const std::map<std::string, std::string>& metadata)
    : out_(path) {
  std::string header = safetensors_header_bytes(specs, metadata);
  for (const auto& s : specs) expected_total_ += s.nbytes();
  out_.write(header);
  hash_.update(header.data(), header.size());
}

void SafetensorsWriter::write(const void* data, size_t size) {
  if (data_written_ + size > expected_total_)
    fail(ErrorKind::kInternal, "{}: more tensor bytes written than the header declares",
         out_.path());
  out_.write(data, size);
  hash_.update(data, size);
  data_written_ += size;
}

std::string SafetensorsWriter::finish() {
  if (data_written_ != expected_total_)
    fail(ErrorKind::kInternal, "{}: {} tensor bytes written, header declares {}", out_.path(),
         data_written_, expected_total_);
  out_.close_synced();
  return hash_.hex();
}

}  // namespace kev
