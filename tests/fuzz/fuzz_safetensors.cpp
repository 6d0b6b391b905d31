// Fuzzes the safetensors header parser: any byte string either parses into a consistent
// tensor table or is refused with kev::Error; nothing else may happen.
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "kev/core/error.h"
#include "kev/formats/safetensors.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string_view bytes(reinterpret_cast<const char*>(data), size);
  try {
    auto h = kev::parse_safetensors(bytes, "fuzz");
    uint64_t end = 0;
    for (const auto& t : h.tensors) {
      if (t.offset != end) __builtin_trap();
      end = t.offset + t.nbytes;
    }
    if (h.data_start + end != size) __builtin_trap();
  } catch (const kev::Error&) {
  }
  return 0;
}
