// kev_export.json, an export bundle's manifest, read in one place for every reader that runs a
// bundle (the model loader, so kev forward, score and serve; the pointer head's loader; serve's
// GET /v1/models). The format is documented in docs/bundle-format.md.
//
// Contract: read_bundle_manifest(dir) reads <dir>/kev_export.json with the strict JSON reader
// (core/json_strict.h: duplicate keys refused), and refuses, naming the file, a manifest that is
// missing, not JSON or not an object (Error kBadInput), or that records anything this kev does
// not implement (check_bundle_supported, checkpoint_fields.h: Error kUnsupported). The typed
// accessors refuse a present key of the wrong type (kBadInput, naming the file and key): a
// section ("outputs", "dimensions", "base", "checkpoint", "lora") that is not an object, or a
// value inside one of the wrong type. `kev verify` (export/bundle.h) reads the manifest with the
// same strict reader but checks it itself: there a damaged manifest is an integrity failure, and
// verify checks hashes whatever the bundle's fields say. Both go through read_manifest_document,
// the one place the file is read and parsed. Thread-safe (no shared state).
#pragma once
#include <cstdint>
#include <optional>
#include <string>

#include "kev/core/json_strict.h"

namespace kev {

inline constexpr const char* kManifestFile = "kev_export.json";

struct BundleManifest {
  std::string path;  // <dir>/kev_export.json, for messages
  OrderedJson doc;   // the whole object, keys in file order

  std::string model() const;                  // "model": a non-empty string (required)
  std::optional<double> temperature() const;  // "temperature": a number, if present
  std::optional<std::string> output_sha256(const std::string& file) const;  // outputs.<file>
  std::optional<uint64_t> dimension(const std::string& key) const;          // dimensions.<key>
  // <section>.repo ("base", "checkpoint"), or "" where the section or its repo is absent
  std::string repo_of(const char* section) const;
  std::optional<int64_t> lora_rank() const;  // lora.rank (an integer), if present
};

BundleManifest read_bundle_manifest(const std::string& bundle_dir);
// The manifest as a document only: present, strict JSON, an object (Error kBadInput otherwise,
// naming the file); nothing about what it records is checked.
BundleManifest read_manifest_document(const std::string& bundle_dir);

// Whether <dir> holds a manifest at all (a base model directory does not).
bool has_bundle_manifest(const std::string& dir);

}  // namespace kev
