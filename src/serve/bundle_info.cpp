// BundleInfo (kev/serve/http_server.h): what GET /v1/models says of the served bundle, from its
// manifest kev_export.json.
#include <sys/stat.h>

#include <ctime>

#include "kev/core/error.h"
#include "kev/core/file.h"
#include "kev/serve/http_server.h"
#include "kev/text/api.h"

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

std::string model_of(const OrderedJson& manifest, const std::string& path) {
  auto it = manifest.find("model");
  if (!manifest.is_object() || it == manifest.end() || !it->is_string() ||
      it->get<std::string>().empty())
    fail(ErrorKind::kBadInput, "{}: \"model\" is missing or not a non-empty string", path);
  return it->get<std::string>();
}

}  // namespace

BundleInfo read_bundle_info(const std::string& bundle_dir) {
  const std::string path = bundle_dir + "/" + "kev_export.json";
  OrderedJson m = parse_json_strict(read_file(path), path);
  BundleInfo info;
  info.model = model_of(m, path);
  auto repo = [&](const char* key) {
    auto it = m.find(key);
    if (it == m.end() || !it->is_object()) return std::string();
    auto r = it->find("repo");
    return r != it->end() && r->is_string() ? r->get<std::string>() : std::string();
  };
  info.base = repo("base");
  info.run = repo("checkpoint");
  if (info.run.empty()) info.run = info.model;
  if (auto l = m.find("lora"); l != m.end() && l->is_object())
    if (auto r = l->find("rank"); r != l->end() && r->is_number_integer())
      info.lora_rank = r->get<int64_t>();
  if (auto t = m.find("temperature"); t != m.end() && t->is_number())
    info.temperature = t->get<double>();
  info.release_date = utc_date(bundle_dir + "/head.safetensors");
  return info;
}

std::string bundle_model_name(const std::string& bundle_dir) {
  const std::string path = bundle_dir + "/" + "kev_export.json";
  return model_of(parse_json_strict(read_file(path), path), path);
}

}  // namespace kev
