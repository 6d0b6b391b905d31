#include "formats/zip.h"

#include <array>
#include <limits>

#include "kev/core/error.h"

namespace kev {
namespace {

constexpr uint32_t kLocalSig = 0x04034b50, kCentralSig = 0x02014b50, kEndSig = 0x06054b50;
constexpr uint32_t kEnd64Sig = 0x06064b50, kLocator64Sig = 0x07064b50;
constexpr size_t kEndSize = 22, kLocatorSize = 20, kEnd64Size = 56, kCentralSize = 46,
                 kLocalSize = 30;

const std::array<uint32_t, 256>& crc_table() {
  static const std::array<uint32_t, 256> table = [] {
    std::array<uint32_t, 256> t{};
    for (uint32_t i = 0; i < 256; ++i) {
      uint32_t c = i;
      for (int k = 0; k < 8; ++k) c = (c & 1) ? 0xEDB88320u ^ (c >> 1) : c >> 1;
      t[i] = c;
    }
    return t;
  }();
  return table;
}

uint64_t le(std::string_view b, size_t at, int n) {
  uint64_t v = 0;
  for (int i = n - 1; i >= 0; --i) v = (v << 8) | static_cast<uint8_t>(b[at + i]);
  return v;
}

void put(std::string& out, uint64_t v, int n) {
  for (int i = 0; i < n; ++i) out.push_back(static_cast<char>((v >> (8 * i)) & 0xff));
}

}  // namespace

uint32_t crc32(std::string_view bytes, uint32_t crc) {
  const auto& t = crc_table();
  crc = ~crc;
  for (char ch : bytes) crc = t[(crc ^ static_cast<uint8_t>(ch)) & 0xff] ^ (crc >> 8);
  return ~crc;
}

ZipReader::ZipReader(std::string_view archive, std::string name_for_errors)
    : bytes_(archive), file_(std::move(name_for_errors)) {
  const uint64_t size = bytes_.size();
  auto bad = [&](const char* what) {
    fail(ErrorKind::kBadInput, "{} is not a valid zip archive: {}", file_, what);
  };
  if (size < kEndSize) bad("shorter than an end-of-central-directory record");
  // The end record sits at the very end, followed only by its comment.
  uint64_t end = size;
  uint64_t lowest = size >= kEndSize + 0xffff ? size - kEndSize - 0xffff : 0;
  for (uint64_t pos = size - kEndSize + 1; pos-- > lowest;) {
    if (le(bytes_, pos, 4) == kEndSig && pos + kEndSize + le(bytes_, pos + 20, 2) == size) {
      end = pos;
      break;
    }
  }
  if (end == size) bad("no end-of-central-directory record");
  if (le(bytes_, end + 4, 2) != 0 || le(bytes_, end + 6, 2) != 0)
    bad("multi-disk archives are not supported");
  uint64_t count = le(bytes_, end + 10, 2);
  if (le(bytes_, end + 8, 2) != count) bad("inconsistent entry counts");
  uint64_t cd_size = le(bytes_, end + 12, 4), cd_offset = le(bytes_, end + 16, 4);
  uint64_t cd_limit = end;  // the central directory must end before the end record(s)

  if (end >= kLocatorSize && le(bytes_, end - kLocatorSize, 4) == kLocator64Sig) {
    uint64_t loc = end - kLocatorSize;
    if (le(bytes_, loc + 4, 4) != 0 || le(bytes_, loc + 16, 4) != 1)
      bad("multi-disk zip64 archives are not supported");
    uint64_t e64 = le(bytes_, loc + 8, 8);
    if (e64 > loc || loc - e64 < kEnd64Size || le(bytes_, e64, 4) != kEnd64Sig)
      bad("bad zip64 end record");
    if (le(bytes_, e64 + 16, 4) != 0 || le(bytes_, e64 + 20, 4) != 0)
      bad("multi-disk zip64 archives are not supported");
    uint64_t count64 = le(bytes_, e64 + 32, 8);
    if (le(bytes_, e64 + 24, 8) != count64) bad("inconsistent zip64 entry counts");
    if (count != 0xffff && count != count64) bad("zip64 entry count disagrees with the end record");
    count = count64;
    cd_size = le(bytes_, e64 + 40, 8);
    cd_offset = le(bytes_, e64 + 48, 8);
    cd_limit = e64;
  } else if (count == 0xffff || cd_size == 0xffffffff || cd_offset == 0xffffffff) {
    bad("zip64 values without a zip64 end record");
  }
  if (cd_offset > cd_limit || cd_size > cd_limit - cd_offset)
    bad("central directory outside the file");
  if (count > cd_size / kCentralSize) bad("more entries than the central directory can hold");

  entries_.reserve(count);
  uint64_t pos = cd_offset, cd_end = cd_offset + cd_size;
  for (uint64_t i = 0; i < count; ++i) {
    if (cd_end - pos < kCentralSize || le(bytes_, pos, 4) != kCentralSig)
      bad("bad central directory entry");
    uint64_t flags = le(bytes_, pos + 8, 2), method = le(bytes_, pos + 10, 2);
    uint64_t crc = le(bytes_, pos + 16, 4), csize = le(bytes_, pos + 20, 4),
             usize = le(bytes_, pos + 24, 4);
    uint64_t nlen = le(bytes_, pos + 28, 2), xlen = le(bytes_, pos + 30, 2),
             clen = le(bytes_, pos + 32, 2);
    uint64_t disk = le(bytes_, pos + 34, 2), local = le(bytes_, pos + 42, 4);
    if (cd_end - pos - kCentralSize < nlen + xlen + clen)
      bad("central directory entry overruns the directory");
    std::string name(bytes_.substr(pos + kCentralSize, nlen));
    // zip64 extra field: the 64-bit values of exactly those fields that are saturated.
    uint64_t x = pos + kCentralSize + nlen, x_end = x + xlen;
    while (x_end - x >= 4) {
      uint64_t id = le(bytes_, x, 2), len = le(bytes_, x + 2, 2);
      if (x_end - x - 4 < len) bad("bad extra field in the central directory");
      if (id == 1) {
        uint64_t f = x + 4, f_end = f + len;
        auto take = [&](uint64_t& v) {
          if (f_end - f < 8) bad("truncated zip64 extra field");
          v = le(bytes_, f, 8);
          f += 8;
        };
        if (usize == 0xffffffff) take(usize);
        if (csize == 0xffffffff) take(csize);
        if (local == 0xffffffff) take(local);
      }
      x += 4 + len;
    }
    if (x != x_end) bad("bad extra field in the central directory");
    if (disk != 0 && disk != 0xffff) bad("multi-disk archives are not supported");
    if (flags & 1) fail(ErrorKind::kBadInput, "{}: entry {} is encrypted", file_, name);
    if (method != 0 || csize != usize)
      fail(ErrorKind::kBadInput,
           "{}: entry {} is compressed (method {}); torch archives store entries", file_, name,
           method);
    if (local > cd_offset || cd_offset - local < kLocalSize || le(bytes_, local, 4) != kLocalSig)
      fail(ErrorKind::kBadInput, "{}: entry {} has no local header at offset {}", file_, name,
           local);
    uint64_t lnlen = le(bytes_, local + 26, 2), lxlen = le(bytes_, local + 28, 2);
    uint64_t data = local + kLocalSize + lnlen + lxlen;
    if (data > cd_offset || lnlen != nlen || bytes_.substr(local + kLocalSize, lnlen) != name)
      fail(ErrorKind::kBadInput,
           "{}: local header of entry {} disagrees with the central directory", file_, name);
    if (usize > cd_offset - data)
      fail(ErrorKind::kBadInput, "{}: entry {} extends past the start of the central directory",
           file_, name);
    if (!by_name_.emplace(name, entries_.size()).second)
      fail(ErrorKind::kBadInput, "{}: duplicate entry {}", file_, name);
    entries_.push_back({std::move(name), data, usize, static_cast<uint32_t>(crc)});
    pos += kCentralSize + nlen + xlen + clen;
  }
}

const ZipEntry* ZipReader::find(std::string_view name) const {
  auto it = by_name_.find(name);
  return it == by_name_.end() ? nullptr : &entries_[it->second];
}

std::string_view ZipReader::read(const ZipEntry& e) const {
  std::string_view data = bytes_.substr(e.data_offset, e.size);
  if (crc32(data) != e.crc)
    fail(ErrorKind::kBadInput, "{}: entry {} is corrupt (CRC-32 mismatch)", file_, e.name);
  return data;
}

std::string build_stored_zip(const std::vector<std::pair<std::string, std::string>>& entries,
                             size_t alignment) {
  std::string out, central;
  for (const auto& entry : entries) {
    const std::string& name = entry.first;  // not a structured binding: lambdas capture it
    const std::string& data = entry.second;
    if (name.size() > 0xffff || data.size() >= 0xffffffffu || out.size() >= 0xffffffffu)
      fail(ErrorKind::kUnsupported, "zip entry {} is too large for a non-zip64 archive", name);
    uint64_t offset = out.size();
    size_t pad =
        alignment ? (alignment - (offset + kLocalSize + name.size()) % alignment) % alignment : 0;
    if (pad && pad < 4) pad += alignment;  // room for the extra field's own header
    std::string extra;
    if (pad) {
      put(extra, 0x4246, 2);  // "FB": padding, as torch writes it
      put(extra, pad - 4, 2);
      extra.append(pad - 4, 'Z');
    }
    uint32_t crc = crc32(data);
    auto common = [&](std::string& s) {
      put(s, 20, 2);  // version needed: 2.0
      put(s, 0, 2);   // flags
      put(s, 0, 2);   // stored
      put(s, 0, 4);   // time, date
      put(s, crc, 4);
      put(s, data.size(), 4);
      put(s, data.size(), 4);
      put(s, name.size(), 2);
    };
    put(out, kLocalSig, 4);
    common(out);
    put(out, extra.size(), 2);
    out += name;
    out += extra;
    out += data;
    put(central, kCentralSig, 4);
    put(central, 20, 2);  // made by
    common(central);
    put(central, 0, 2);  // extra
    put(central, 0, 2);  // comment
    put(central, 0, 2);  // disk
    put(central, 0, 2);  // internal attributes
    put(central, 0, 4);  // external attributes
    put(central, offset, 4);
    central += name;
  }
  if (entries.size() >= 0xffff || out.size() >= 0xffffffffu)
    fail(ErrorKind::kUnsupported, "zip archive too large for a non-zip64 archive");
  uint64_t cd_offset = out.size();
  out += central;
  put(out, kEndSig, 4);
  put(out, 0, 4);  // disk numbers
  put(out, entries.size(), 2);
  put(out, entries.size(), 2);
  put(out, central.size(), 4);
  put(out, cd_offset, 4);
  put(out, 0, 2);
  return out;
}

}  // namespace kev
