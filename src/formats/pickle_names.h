// The names a torch checkpoint's pickle uses, one table each for the reader
// (torch_checkpoint_read.cpp) and the writer and PyValue (torch_checkpoint.cpp), so what one
// writes the other reads and both say the same in errors.
#pragma once
#include <cstddef>

#include "kev/formats/safetensors.h"  // DType

namespace kev {

// Python's names for the values a pickle holds, in the order of PyValue's alternatives and of the
// reader's node kinds: None, bool, int, float, str, bytes, list, tuple, dict (an OrderedDict is
// named as such by the caller, which knows).
inline constexpr const char* kPythonTypeNames[] = {"None",  "bool", "int",   "float", "str",
                                                   "bytes", "list", "tuple", "dict"};
inline constexpr std::size_t kPythonDictIndex = 8;

// torch's storage classes by element type: how the pickle names a tensor's storage
// ("torch", "FloatStorage").
struct StorageClass {
  const char* name;
  DType dtype;
};
inline constexpr StorageClass kStorageClasses[] = {
    {"FloatStorage", DType::kF32},     {"DoubleStorage", DType::kF64}, {"HalfStorage", DType::kF16},
    {"BFloat16Storage", DType::kBF16}, {"LongStorage", DType::kI64},   {"IntStorage", DType::kI32},
    {"ShortStorage", DType::kI16},     {"CharStorage", DType::kI8},    {"ByteStorage", DType::kU8},
    {"BoolStorage", DType::kBool},
};

}  // namespace kev
