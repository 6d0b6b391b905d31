// The export layer's tests: which kev::Error a call throws (kInternal and a test failure when it
// throws none), with its message if asked for.
#pragma once
#include <gtest/gtest.h>

#include <functional>
#include <string>

#include "kev/core/error.h"

namespace kev::export_test {

inline ErrorKind kind_of(const std::function<void()>& fn, std::string* message = nullptr) {
  try {
    fn();
  } catch (const Error& e) {
    if (message) *message = e.what();
    return e.kind();
  }
  ADD_FAILURE() << "no kev::Error thrown";
  return ErrorKind::kInternal;
}

}  // namespace kev::export_test
