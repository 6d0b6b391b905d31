#include "kev/formats/bundle_manifest.h"

#include "kev/core/error.h"
#include "kev/core/file.h"
#include "kev/formats/checkpoint_fields.h"

namespace kev {

BundleManifest read_manifest_document(const std::string& bundle_dir) {
  BundleManifest m;
  m.path = bundle_dir + "/" + kManifestFile;
  if (!path_exists(m.path))
    fail(ErrorKind::kBadInput, "{} has no {}; it is not a kev export bundle", bundle_dir,
         kManifestFile);
  m.doc = parse_json_strict(read_file(m.path), m.path);
  if (!m.doc.is_object()) fail(ErrorKind::kBadInput, "{} must hold a JSON object", m.path);
  return m;
}

BundleManifest read_bundle_manifest(const std::string& bundle_dir) {
  BundleManifest m = read_manifest_document(bundle_dir);
  // A bundle that says something this kev does not implement is refused, not run.
  check_bundle_supported(m.doc, m.path);
  return m;
}

bool has_bundle_manifest(const std::string& dir) {
  return path_exists(dir + "/" + kManifestFile);
}

std::string BundleManifest::model() const {
  auto it = doc.find("model");
  if (it == doc.end() || !it->is_string() || it->get<std::string>().empty())
    fail(ErrorKind::kBadInput, "{}: \"model\" is missing or not a non-empty string", path);
  return it->get<std::string>();
}

std::optional<double> BundleManifest::temperature() const {
  auto it = doc.find("temperature");
  if (it == doc.end()) return std::nullopt;
  if (!it->is_number()) fail(ErrorKind::kBadInput, "{}: \"temperature\" is not a number", path);
  return it->get<double>();
}

std::optional<std::string> BundleManifest::output_sha256(const std::string& file) const {
  auto outputs = doc.find("outputs");
  if (outputs == doc.end()) return std::nullopt;
  if (!outputs->is_object()) fail(ErrorKind::kBadInput, "{}: \"outputs\" is not an object", path);
  auto it = outputs->find(file);
  if (it == outputs->end()) return std::nullopt;
  if (!it->is_string()) fail(ErrorKind::kBadInput, "{}: outputs.{} is not a string", path, file);
  return it->get<std::string>();
}

std::optional<uint64_t> BundleManifest::dimension(const std::string& key) const {
  auto dims = doc.find("dimensions");
  if (dims == doc.end()) return std::nullopt;
  if (!dims->is_object()) fail(ErrorKind::kBadInput, "{}: \"dimensions\" is not an object", path);
  auto it = dims->find(key);
  if (it == dims->end()) return std::nullopt;
  if (!it->is_number_unsigned())
    fail(ErrorKind::kBadInput, "{}: dimensions.{} is not a non-negative integer", path, key);
  return it->get<uint64_t>();
}

std::string BundleManifest::repo_of(const char* section) const {
  auto it = doc.find(section);
  if (it == doc.end()) return "";
  if (!it->is_object()) fail(ErrorKind::kBadInput, "{}: \"{}\" is not an object", path, section);
  auto repo = it->find("repo");
  if (repo == it->end()) return "";
  if (!repo->is_string()) fail(ErrorKind::kBadInput, "{}: {}.repo is not a string", path, section);
  return repo->get<std::string>();
}

std::optional<int64_t> BundleManifest::lora_rank() const {
  auto it = doc.find("lora");
  if (it == doc.end()) return std::nullopt;
  if (!it->is_object()) fail(ErrorKind::kBadInput, "{}: \"lora\" is not an object", path);
  auto rank = it->find("rank");
  if (rank == it->end()) return std::nullopt;
  if (!rank->is_number_integer())
    fail(ErrorKind::kBadInput, "{}: lora.rank is not an integer", path);
  return rank->get<int64_t>();
}

}  // namespace kev
