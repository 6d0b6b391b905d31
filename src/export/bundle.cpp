#include "kev/export/bundle.h"

#include <dirent.h>

#include <nlohmann/json.hpp>

#include <cmath>
#include <cstring>
#include <set>

#include "kev/core/error.h"
#include "kev/core/file.h"
#include "kev/core/json_strict.h"
#include "kev/core/sha256.h"
#include "kev/export/recipe.h"
#include "kev/formats/bundle_manifest.h"

namespace kev {
namespace {

std::vector<float> f32_values(const TorchTensor& t) {
  std::vector<float> v(static_cast<size_t>(t.numel()));
  if (t.bytes.size() != v.size() * sizeof(float))
    fail(ErrorKind::kInternal, "tensor bytes do not match its shape");
  std::memcpy(v.data(), t.bytes.data(), t.bytes.size());
  return v;
}

}  // namespace

HeadWeights extract_head(const PyValue& root, int64_t hidden, const std::string& name) {
  if (!root.as_dict())
    fail(ErrorKind::kBadInput, "{}: the top level is {}, not a dict", name, root.type_name());
  const PyValue* head = root.get("head");
  if (!head || !head->as_dict())
    fail(ErrorKind::kBadInput, "{}: \"head\" must be a dict of the four pointer-head tensors",
         name);
  if (head->as_dict()->size() != 4)
    fail(ErrorKind::kBadInput,
         "{}: \"head\" has {} entries; expected exactly q.weight, q.bias, "
         "k.weight, k.bias",
         name, head->as_dict()->size());
  HeadWeights h;
  h.hidden = hidden;
  const TorchTensor* ts[4];
  for (int i = 0; i < 4; ++i) {
    const PyValue* v = head->get(kHeadTensorNames[i]);
    if (!v || !v->as_tensor())
      fail(ErrorKind::kBadInput, "{}: head[\"{}\"] is missing or not a tensor", name,
           kHeadTensorNames[i]);
    ts[i] = v->as_tensor();
    if (ts[i]->dtype != DType::kF32)
      fail(ErrorKind::kBadInput, "{}: head[\"{}\"] is {}; the pointer head must be F32", name,
           kHeadTensorNames[i], dtype_name(ts[i]->dtype));
  }
  const auto& qw = ts[0]->shape;
  if (qw.size() != 2 || qw[0] <= 0 || qw[1] != hidden)
    fail(ErrorKind::kBadInput,
         "{}: head[\"q.weight\"] has shape {}; expected [p, {}] (the base "
         "hidden size)",
         name, shape_string(qw), hidden);
  h.pointer = qw[0];
  std::vector<int64_t> want[4] = {
      {h.pointer, hidden}, {h.pointer}, {h.pointer, hidden}, {h.pointer}};
  for (int i = 0; i < 4; ++i) {
    if (ts[i]->shape != want[i])
      fail(ErrorKind::kBadInput, "{}: head[\"{}\"] has shape {}; expected {}", name,
           kHeadTensorNames[i], shape_string(ts[i]->shape), shape_string(want[i]));
    h.tensors[i] = f32_values(*ts[i]);
    for (size_t k = 0; k < h.tensors[i].size(); ++k)
      if (!std::isfinite(h.tensors[i][k]))
        fail(ErrorKind::kBadInput, "{}: head[\"{}\"] element {} is {}; head weights must be finite",
             name, kHeadTensorNames[i], k, h.tensors[i][k]);
  }
  if (const PyValue* hd = root.get("head_dim")) {
    const int64_t* dim = std::get_if<int64_t>(&hd->v);
    if (!dim) fail(ErrorKind::kBadInput, "{}: head_dim is a {}, not an int", name, hd->type_name());
    if (*dim != h.pointer)
      fail(ErrorKind::kBadInput,
           "{}: head_dim is {} but the head tensors have pointer dimension {}", name, *dim,
           h.pointer);
  }
  const PyValue* t = root.get("temperature");
  if (!t || !t->as_number())
    fail(ErrorKind::kBadInput, "{}: \"temperature\" is missing or not a number", name);
  h.temperature = *t->as_number();
  if (!std::isfinite(h.temperature) || h.temperature <= 0)
    fail(ErrorKind::kBadInput, "{}: temperature is {}; it must be finite and > 0", name,
         h.temperature);
  return h;
}

std::string write_head_safetensors(const std::string& path, const HeadWeights& h) {
  std::vector<TensorSpec> specs;
  for (int i = 0; i < 4; ++i) {
    std::vector<int64_t> shape =
        (i % 2 == 0) ? std::vector<int64_t>{h.pointer, h.hidden} : std::vector<int64_t>{h.pointer};
    specs.push_back({kHeadTensorNames[i], DType::kF32, shape});
  }
  SafetensorsWriter w(path, specs);
  for (const auto& t : h.tensors) w.write(t.data(), t.size() * sizeof(float));
  return w.finish();
}

size_t verify_bundle(const std::string& dir) {
  const std::string manifest_path = dir + "/" + kManifestFile;
  if (!path_exists(manifest_path))
    fail(ErrorKind::kIntegrity, "{} has no {}; it is not a kev export bundle", dir, kManifestFile);
  // The one reader (formats/bundle_manifest.h); here a damaged manifest is an integrity failure.
  OrderedJson m;
  try {
    m = read_manifest_document(dir).doc;
  } catch (const Error& e) {
    fail(ErrorKind::kIntegrity, "{} is not a valid manifest ({})", manifest_path, e.what());
  }
  if (!m.contains("outputs") || !m["outputs"].is_object())
    fail(ErrorKind::kIntegrity, "{} is not a valid manifest (no \"outputs\" object)",
         manifest_path);
  // Only "format" and "outputs" (with string digests, checked per entry below) are read here;
  // type-check before comparing so a wrong type is a refusal, not a json exception.
  auto format = m.find("format");
  if (format == m.end() || !format->is_string())
    fail(ErrorKind::kIntegrity, "{} is not a valid manifest (\"format\" is {}, not a string)",
         manifest_path, format == m.end() ? "missing" : format->type_name());
  if (format->get<std::string>() != kBundleFormat)
    fail(ErrorKind::kUnsupported, "{} has format {}; this kev verifies \"{}\"", manifest_path,
         format->dump(), kBundleFormat);
  std::vector<std::string> problems;
  std::set<std::string> listed;
  for (const auto& [name, digest] : m["outputs"].items()) {
    listed.insert(name);
    if (!is_plain_file_name(name) || name == kManifestFile || !digest.is_string()) {
      problems.push_back(fmt::format("manifest entry \"{}\" is invalid", name));
      continue;
    }
    std::string path = dir + "/" + name;
    if (!path_exists(path)) {
      problems.push_back(fmt::format("{} is missing", name));
      continue;
    }
    std::string actual = sha256_file(path);
    if (actual != digest.get<std::string>())
      problems.push_back(fmt::format("{} has SHA-256 {} but the manifest records {}", name, actual,
                                     digest.get<std::string>()));
  }
  if (DIR* d = ::opendir(dir.c_str())) {
    while (dirent* e = ::readdir(d)) {
      std::string n = e->d_name;
      if (n == "." || n == ".." || n == kManifestFile) continue;
      if (!listed.count(n)) problems.push_back(fmt::format("{} is not listed in the manifest", n));
    }
    ::closedir(d);
  } else {
    fail(ErrorKind::kIo, "cannot list {}", dir);
  }
  if (!problems.empty()) {
    std::string msg;
    for (const auto& p : problems) msg += (msg.empty() ? "" : "; ") + p;
    fail(ErrorKind::kIntegrity, "bundle {} failed verification: {}", dir, msg);
  }
  return listed.size();
}

}  // namespace kev
