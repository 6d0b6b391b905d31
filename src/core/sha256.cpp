#include "kev/core/sha256.h"

#include <openssl/evp.h>

#include "kev/core/error.h"
#include "kev/core/file.h"

namespace kev {

struct Sha256::Impl {
  EVP_MD_CTX* ctx = nullptr;
};

Sha256::Sha256() : impl_(std::make_unique<Impl>()) {
  impl_->ctx = EVP_MD_CTX_new();
  if (!impl_->ctx || EVP_DigestInit_ex(impl_->ctx, EVP_sha256(), nullptr) != 1)
    fail(ErrorKind::kInternal, "OpenSSL could not initialise SHA-256");
}

Sha256::~Sha256() {
  EVP_MD_CTX_free(impl_->ctx);
}

void Sha256::update(const void* data, size_t size) {
  if (size && EVP_DigestUpdate(impl_->ctx, data, size) != 1)
    fail(ErrorKind::kInternal, "OpenSSL SHA-256 update failed");
}

std::array<uint8_t, 32> Sha256::digest() {
  std::array<uint8_t, 32> out{};
  unsigned int len = 0;
  if (EVP_DigestFinal_ex(impl_->ctx, out.data(), &len) != 1 || len != 32)
    fail(ErrorKind::kInternal, "OpenSSL SHA-256 final failed");
  return out;
}

std::string Sha256::hex() {
  static const char* kDigits = "0123456789abcdef";
  auto d = digest();
  std::string s(64, '0');
  for (size_t i = 0; i < 32; ++i) {
    s[2 * i] = kDigits[d[i] >> 4];
    s[2 * i + 1] = kDigits[d[i] & 15];
  }
  return s;
}

std::string sha256_hex(std::string_view bytes) {
  Sha256 h;
  h.update(bytes.data(), bytes.size());
  return h.hex();
}

std::string sha256_file(const std::string& path) {
  MappedFile file(path);
  Sha256 h;
  constexpr size_t kChunk = size_t{64} << 20;
  for (size_t off = 0; off < file.size(); off += kChunk) {
    size_t n = std::min(kChunk, file.size() - off);
    h.update(file.data() + off, n);
    file.release_pages(off, n);
  }
  return h.hex();
}

bool is_sha256_hex(std::string_view s) {
  if (s.size() != 64) return false;
  for (char c : s)
    if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'))) return false;
  return true;
}

}  // namespace kev
