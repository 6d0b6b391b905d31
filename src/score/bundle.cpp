// A bundle opened once (kev/score/bundle.h).
#include <sys/stat.h>

#include "kev/core/error.h"
#include "kev/core/utc_time.h"
#include "kev/score/bundle.h"

namespace kev {
namespace {

std::string modified_date(const std::string& path) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) fail(ErrorKind::kIo, "cannot stat {}", path);
  return kev::utc_date(st.st_mtime);
}

}  // namespace

Bundle open_bundle(const std::string& dir) {
  return Bundle{dir, read_bundle_manifest(dir)};
}

BundleInfo Bundle::info() const {
  const BundleManifest& m = manifest;
  BundleInfo info;
  info.model = m.model();
  info.base = m.repo_of("base");
  info.run = m.repo_of("checkpoint");
  if (info.run.empty()) info.run = info.model;
  info.lora_rank = m.lora_rank().value_or(0);
  info.temperature = m.temperature().value_or(1.0);
  info.release_date = modified_date(dir + "/head.safetensors");
  return info;
}

}  // namespace kev
