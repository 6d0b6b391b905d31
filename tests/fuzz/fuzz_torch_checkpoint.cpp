// Fuzzes the torch.save reader: any byte string either reads into consistent values or is
// refused with kev::Error; nothing else may happen (no crash, leak, overflow or hang).
//
// Inputs starting with "PK" are whole archives. Anything else is taken as data.pkl and wrapped
// into a valid archive (correct CRCs, storages "0" of 16 floats and "1" of 64 bytes), so the
// mutator reaches the pickle interpreter instead of dying on the CRC check.
#include <cstddef>
#include <cstdint>
#include <string>

#include "../../src/formats/zip.h"  // internal: the archive builder (kev_formats links it)
#include "kev/core/error.h"
#include "kev/formats/torch_checkpoint.h"

namespace {

void check(const kev::PyValue& v, int depth) {
  if (depth > 200) __builtin_trap();
  if (const auto* t = v.as_tensor()) {
    if (t->bytes.size() != static_cast<uint64_t>(t->numel()) * kev::dtype_size(t->dtype))
      __builtin_trap();
  } else if (const auto* d = v.as_dict()) {
    for (const auto& [k, x] : *d) {
      check(k, depth + 1);
      check(x, depth + 1);
    }
  } else if (const auto* l = std::get_if<kev::PyList>(&v.v)) {
    for (const auto& x : *l) check(x, depth + 1);
  } else if (const auto* t = std::get_if<kev::PyValue::Tuple>(&v.v)) {
    for (const auto& x : t->items) check(x, depth + 1);
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string bytes(reinterpret_cast<const char*>(data), size);
  try {
    if (bytes.compare(0, 2, "PK") != 0)
      bytes = kev::build_stored_zip({{"archive/data.pkl", bytes},
                                     {"archive/data/0", std::string(64, '\x01')},
                                     {"archive/data/1", std::string(64, '\x02')},
                                     {"archive/version", "3\n"}});
    check(kev::read_torch_checkpoint_bytes(bytes, "fuzz"), 0);
  } catch (const kev::Error&) {
  }
  return 0;
}
