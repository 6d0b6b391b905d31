// SHA-256 (OpenSSL EVP, which uses SHA-NI where the CPU has it).
// Sha256 is incremental: update() any number of times, then hex() once.
#pragma once
#include <array>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

namespace kev {

class Sha256 {
 public:
  Sha256();
  ~Sha256();
  Sha256(const Sha256&) = delete;
  Sha256& operator=(const Sha256&) = delete;
  void update(const void* data, size_t size);
  std::array<uint8_t, 32> digest();  // finishes; call once
  std::string hex();                 // finishes; lowercase hex; call once

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

std::string sha256_hex(std::string_view bytes);
// Streams the file (mmap'd in chunks); throws Error(kIo) naming the path if it cannot be read.
std::string sha256_file(const std::string& path);
bool is_sha256_hex(std::string_view s);  // 64 lowercase hex digits

}  // namespace kev
