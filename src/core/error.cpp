#include "kev/core/error.h"

namespace kev {

int exit_code(ErrorKind kind) {
  switch (kind) {
    case ErrorKind::kBadInput:
      return 2;
    case ErrorKind::kIntegrity:
      return 3;
    case ErrorKind::kIo:
      return 4;
    case ErrorKind::kUnsupported:
      return 5;
    case ErrorKind::kOverload:
      return 6;
    case ErrorKind::kInterrupted:
      return 130;
    case ErrorKind::kInternal:
      return 70;
  }
  return 70;
}

int http_status(ErrorKind kind) {
  switch (kind) {
    case ErrorKind::kBadInput:
    case ErrorKind::kUnsupported:
      return 422;
    case ErrorKind::kOverload:
    case ErrorKind::kInterrupted:
      return 503;
    default:
      return 500;
  }
}

const char* kind_name(ErrorKind kind) {
  switch (kind) {
    case ErrorKind::kBadInput:
      return "bad input";
    case ErrorKind::kIntegrity:
      return "integrity";
    case ErrorKind::kIo:
      return "io";
    case ErrorKind::kUnsupported:
      return "unsupported";
    case ErrorKind::kOverload:
      return "overload";
    case ErrorKind::kInterrupted:
      return "interrupted";
    case ErrorKind::kInternal:
      return "internal";
  }
  return "internal";
}

}  // namespace kev
