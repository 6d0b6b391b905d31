// An export bundle opened once. open_bundle() reads <dir>/kev_export.json a single time with the
// strict manifest reader (formats/bundle_manifest.h: duplicate keys refused, anything this kev
// does not implement refused by name); the scorer then loads the model, the head and the
// tokenizer against that one reading, and the server's model card (GET /v1/models) comes from
// it too. Errors are the manifest reader's (kBadInput / kUnsupported, naming the file).
#pragma once
#include <cstdint>
#include <string>

#include "kev/formats/bundle_manifest.h"

namespace kev {

// What GET /v1/models says of a bundle, from its manifest.
struct BundleInfo {
  std::string model;         // "model"
  std::string run;           // checkpoint.repo (upstream: the run or Hub id served); else model
  std::string base;          // base.repo
  int64_t lora_rank = 0;     // lora.rank
  double temperature = 1.0;  // "temperature"
  std::string release_date;  // YYYY-MM-DD (UTC) head.safetensors was written
};

struct Bundle {
  std::string dir;
  BundleManifest manifest;
  BundleInfo info() const;  // Error(kIo) when head.safetensors cannot be stat'ed
};

Bundle open_bundle(const std::string& dir);

}  // namespace kev
