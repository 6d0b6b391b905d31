// Minimal zip support for torch.save archives (internal to kev_formats and its tests).
//
// ZipReader: a strict, bounds-checked reader of *stored* (uncompressed) archives held in
// memory, with zip64 support. It refuses (Error kBadInput, naming the archive): a missing or
// inconsistent end-of-central-directory record, multi-disk archives, encrypted or compressed
// entries, entries whose ranges leave the file, local headers that disagree with the central
// directory, and duplicate names. CRC-32 is verified when an entry's bytes are requested.
//
// build_stored_zip: writes entries stored, each entry's data starting at a multiple of
// `alignment` (padding goes in an extra field, as torch does), with real CRCs and sizes in
// the local headers (no data descriptors).
#pragma once
#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace kev {

uint32_t crc32(std::string_view bytes, uint32_t crc = 0);

struct ZipEntry {
  std::string name;
  uint64_t data_offset = 0;  // into the archive
  uint64_t size = 0;
  uint32_t crc = 0;
};

class ZipReader {
 public:
  ZipReader(std::string_view archive, std::string name_for_errors);
  const std::vector<ZipEntry>& entries() const { return entries_; }
  const ZipEntry* find(std::string_view name) const;  // nullptr if absent
  // The entry's bytes (a view into the archive), after checking its CRC-32.
  std::string_view read(const ZipEntry& e) const;

 private:
  std::string_view bytes_;
  std::string file_;
  std::vector<ZipEntry> entries_;
  std::map<std::string, size_t, std::less<>> by_name_;
};

std::string build_stored_zip(const std::vector<std::pair<std::string, std::string>>& entries,
                             size_t alignment = 64);

}  // namespace kev
