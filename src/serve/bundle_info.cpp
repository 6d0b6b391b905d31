// BundleInfo (kev/serve/http_server.h): what GET /v1/models says of the served bundle, from its
// manifest kev_export.json.
#include <sys/stat.h>

#include <ctime>

#include "kev/core/error.h"
#include "kev/formats/bundle_manifest.h"
#include "kev/serve/http_server.h"

namespace kev {
namespace {

std::string utc_date(const std::string& path) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) fail(ErrorKind::kIo, "cannot stat {}", path);
  std::tm tm{};
  gmtime_r(&st.st_mtime, &tm);
  char buf[16];
  std::strftime(buf, sizeof(buf), "%Y-%m-%d", &tm);
  return buf;
}

}  // namespace

BundleInfo read_bundle_info(const std::string& bundle_dir) {
  const BundleManifest m = read_bundle_manifest(bundle_dir);
  BundleInfo info;
  info.model = m.model();
  info.base = m.repo_of("base");
  info.run = m.repo_of("checkpoint");
  if (info.run.empty()) info.run = info.model;
  info.lora_rank = m.lora_rank().value_or(0);
  info.temperature = m.temperature().value_or(1.0);
  info.release_date = utc_date(bundle_dir + "/head.safetensors");
  return info;
}

}  // namespace kev
