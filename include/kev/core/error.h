// kev::Error: the one exception type for user-facing failures.
// Contract: every refusal throws Error with a category and one clear sentence that names the
// file / tensor / field at fault and, where possible, says what to do. The CLI maps the
// category to an exit code (exit_code), the server to an HTTP status (http_status).
#pragma once
#include <fmt/format.h>

#include <stdexcept>
#include <string>

namespace kev {

enum class ErrorKind {
  kBadInput,     // malformed or semantically invalid input (files, requests, arguments)
  kIntegrity,    // a hash or manifest does not match
  kIo,           // the filesystem failed (open, write, rename, full disk)
  kUnsupported,  // a valid input that this build does not handle
  kOverload,     // too busy / too large right now
  kInterrupted,  // SIGINT / SIGTERM
  kInternal,     // a bug: an invariant of ours broke
};

class Error : public std::runtime_error {
 public:
  Error(ErrorKind kind, const std::string& message) : std::runtime_error(message), kind_(kind) {}
  ErrorKind kind() const { return kind_; }

 private:
  ErrorKind kind_;
};

// Throws Error(kind, fmt::format(...)).
template <typename... Args>
[[noreturn]] void fail(ErrorKind kind, fmt::format_string<Args...> f, Args&&... args) {
  throw Error(kind, fmt::format(f, std::forward<Args>(args)...));
}

int exit_code(ErrorKind kind);    // 2 bad input, 3 integrity, 4 io, 5 unsupported, 6 overload, 130
                                  // interrupted, 70 internal
int http_status(ErrorKind kind);  // 422, 500, 500, 422, 503, 503, 500
const char* kind_name(ErrorKind kind);

}  // namespace kev
