// torch.save checkpoints (zip archives: <root>/data.pkl + <root>/data/<key> storages) read
// WITHOUT executing pickle code.
//
// The unpickler is an allow-listed interpreter of pickle protocols 2-5: it builds plain
// values (None, bool, int, float, str, bytes, list, tuple, dict) and tensors, and accepts only
// these globals: collections.OrderedDict, torch._utils._rebuild_tensor_v2,
// torch._utils._rebuild_parameter and the torch.<Dtype>Storage classes (persistent-id storage
// references). torch.storage._load_from_bytes is NOT allowed. Any other global (os.system,
// builtins.eval, ...) or opcode (REDUCE of a non-allowed callable, BUILD on non-dicts, ...)
// throws Error(kBadInput) naming it, before anything could run. Storage locations such as
// "cuda:0" are accepted (data is read from the archive either way). Both torch 1.x and 2.x
// archive layouts are accepted (byteorder, .format_version, .storage_alignment,
// .data/serialization_id records; 64-byte aligned storages).
//
// Also a writer for the subset `kev synth` needs (a dict of plain values and contiguous
// CPU tensors), byte-compatible enough that torch.load reads it.
#pragma once
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <variant>
#include <vector>

#include "kev/formats/safetensors.h"

namespace kev {

struct TorchTensor {
  DType dtype = DType::kF32;
  std::vector<int64_t> shape;
  std::vector<int64_t> strides;
  int64_t storage_offset = 0;  // in elements
  std::string storage_key;     // name under data/
  std::string location;        // "cpu", "cuda:0", ...
  // Contiguous row-major bytes of exactly numel * dtype_size, copied out of the archive.
  std::vector<uint8_t> bytes;
  int64_t numel() const;
};

struct PyValue;
struct PyDict;
using PyList = std::vector<PyValue>;

struct PyValue {
  struct None {};
  struct Tuple {
    PyList items;
  };
  std::variant<None, bool, int64_t, double, std::string, std::vector<uint8_t> /*bytes*/, PyList,
               Tuple, std::shared_ptr<PyDict>, std::shared_ptr<TorchTensor>>
      v;

  bool is_none() const { return std::holds_alternative<None>(v); }
  const PyDict* as_dict() const;                   // nullptr if not a dict/OrderedDict
  const PyValue* get(std::string_view key) const;  // dict lookup by str key; nullptr if absent
  const std::string* as_string() const;
  const TorchTensor* as_tensor() const;
  std::optional<double> as_number() const;  // int or float
  std::string type_name() const;            // for error messages
};

// A dict or collections.OrderedDict (`ordered`), insertion order kept, keys unique.
struct PyDict : std::vector<std::pair<PyValue, PyValue>> {
  bool ordered = false;
};

// Reads a torch.save zip archive. Throws Error(kBadInput) for anything malformed or not
// allow-listed, naming `path` and the offending record / global / opcode.
PyValue read_torch_checkpoint(const std::string& path);
// The same from bytes in memory (the fuzz target uses this).
PyValue read_torch_checkpoint_bytes(const std::string& bytes, const std::string& name_for_errors);

// Writes `root` (a dict whose values are plain values, dicts or tensors) as a torch.save
// compatible zip archive (pickle protocol 2, one storage per tensor, version 3, byteorder
// little, 64-byte aligned stored entries) named with `archive_name` as the record prefix.
// Tensors are written from their `bytes` (contiguous, row-major); strides, offset, key and
// location are ignored. The file is created exclusively and fsynced; throws Error(kIo).
void write_torch_checkpoint(const std::string& path, const PyValue& root,
                            const std::string& archive_name = "archive");

}  // namespace kev
