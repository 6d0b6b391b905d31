// safetensors: a strict, validating reader over an mmap, and a streaming writer that hashes
// what it writes.
//
// Layout: u64 little-endian header length N, N bytes of JSON
// {"name": {"dtype": "BF16", "shape": [..], "data_offsets": [begin, end]}, "__metadata__": {..}},
// then the data region. The reader refuses (Error kBadInput, naming the file and tensor): a
// header longer than the file or than 100 MB, non-object JSON, duplicate names, unknown dtypes,
// negative or overflowing shapes, a byte range that does not equal numel * dtype size, ranges
// that overlap, leave holes or do not end exactly at the end of the file, and non-string
// metadata. Tensor data is returned in place (no copy); it may be unaligned.
#pragma once
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "kev/core/file.h"
#include "kev/core/sha256.h"

namespace kev {

enum class DType {
  kF64,
  kF32,
  kF16,
  kBF16,
  kI64,
  kI32,
  kI16,
  kI8,
  kU8,
  kBool,
  kU16,
  kU32,
  kU64,
  kF8E4M3,
  kF8E5M2
};

size_t dtype_size(DType d);
const char* dtype_name(DType d);  // "F32", "BF16", ...
std::optional<DType> parse_dtype(std::string_view name);

struct TensorInfo {
  std::string name;
  DType dtype = DType::kF32;
  std::vector<int64_t> shape;
  uint64_t offset = 0;  // into the data region
  uint64_t nbytes = 0;
  int64_t numel() const;
};

std::string shape_string(const std::vector<int64_t>& shape);  // "[256, 2560]"

struct SafetensorsHeader {
  std::vector<TensorInfo> tensors;  // in data-offset order
  std::map<std::string, std::string> metadata;
  uint64_t data_start = 0;  // 8 + N
};

// Parses and validates the header of a whole safetensors file held in `bytes`.
SafetensorsHeader parse_safetensors(std::string_view bytes, const std::string& name_for_errors);

// A safetensors file's bytes, parsed where they lie (the bytes must outlive it), its tensors
// found by name. `name` is what errors call the file.
class SafetensorsView {
 public:
  SafetensorsView(std::string_view bytes, std::string name);
  const std::string& name() const { return name_; }
  const std::vector<TensorInfo>& tensors() const { return header_.tensors; }
  const std::map<std::string, std::string>& metadata() const { return header_.metadata; }
  const TensorInfo* find(std::string_view name) const;  // nullptr if absent
  const TensorInfo& get(std::string_view name) const;   // throws kBadInput naming file + tensor
  const uint8_t* data(const TensorInfo& t) const {
    return reinterpret_cast<const uint8_t*>(bytes_.data()) + header_.data_start + t.offset;
  }
  std::string_view bytes(const TensorInfo& t) const {
    return {reinterpret_cast<const char*>(data(t)), t.nbytes};
  }

 private:
  std::string_view bytes_;
  std::string name_;
  SafetensorsHeader header_;
  std::map<std::string, size_t, std::less<>> by_name_;
};

// A safetensors file mapped read-only, viewed as above (errors name its path).
class SafetensorsFile {
 public:
  explicit SafetensorsFile(const std::string& path) : file_(path), view_(file_.view(), path) {}
  const std::string& path() const { return file_.path(); }
  const std::vector<TensorInfo>& tensors() const { return view_.tensors(); }
  const std::map<std::string, std::string>& metadata() const { return view_.metadata(); }
  const TensorInfo* find(std::string_view name) const { return view_.find(name); }
  const TensorInfo& get(std::string_view name) const { return view_.get(name); }
  const uint8_t* data(const TensorInfo& t) const { return view_.data(t); }
  std::string_view bytes(const TensorInfo& t) const { return view_.bytes(t); }
  const MappedFile& file() const { return file_; }

 private:
  MappedFile file_;  // before view_, which points into it
  SafetensorsView view_;
};

struct TensorSpec {
  std::string name;
  DType dtype;
  std::vector<int64_t> shape;
  uint64_t nbytes() const;
};

// Header bytes (length prefix included) for tensors laid out in the given order, padded with
// spaces to a multiple of 8 so data starts aligned.
std::string safetensors_header_bytes(const std::vector<TensorSpec>& specs,
                                     const std::map<std::string, std::string>& metadata);

// Streams one safetensors file: the header at construction, then each tensor's bytes in spec
// order (any number of write() calls per tensor), then finish() which checks every byte was
// supplied, fsyncs and returns the file's SHA-256.
class SafetensorsWriter {
 public:
  SafetensorsWriter(const std::string& path, std::vector<TensorSpec> specs,
                    const std::map<std::string, std::string>& metadata = {{"format", "pt"}});
  void write(const void* data, size_t size);
  std::string finish();
  uint64_t bytes_written() const { return out_.bytes_written(); }

 private:
  OutputFile out_;
  Sha256 hash_;
  uint64_t expected_total_ = 0, data_written_ = 0;
};

}  // namespace kev
