#include "kev/export/recipe.h"

#include <nlohmann/json.hpp>

#include <cmath>

#include "kev/core/error.h"
#include "kev/core/file.h"
#include "kev/core/sha256.h"

namespace kev {
namespace {

using Json = nlohmann::json;

bool is_hex(std::string_view s) {
  for (char c : s)
    if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'))) return false;
  return !s.empty();
}

const Json& member(const Json& obj, const char* key, const std::string& where,
                   const std::string& file) {
  auto it = obj.find(key);
  if (it == obj.end())
    fail(ErrorKind::kBadInput, "recipe {} has no \"{}\" in {}", file, key, where);
  return *it;
}

std::string string_member(const Json& obj, const char* key, const std::string& where,
                          const std::string& file) {
  const Json& v = member(obj, key, where, file);
  if (!v.is_string() || v.get<std::string>().empty())
    fail(ErrorKind::kBadInput, "recipe {}: {}.{} must be a non-empty string", file, where, key);
  return v.get<std::string>();
}

PinnedRepo parse_repo(const Json& root, const char* key, const std::string& file,
                      bool files_optional = false) {
  const Json& j = member(root, key, "the recipe", file);
  if (!j.is_object()) fail(ErrorKind::kBadInput, "recipe {}: \"{}\" must be an object", file, key);
  PinnedRepo r;
  r.repo = string_member(j, "repo", key, file);
  // null: the release revision is not known to the recipe; `kev pin` fills it.
  const Json& rev = member(j, "revision", key, file);
  if (!rev.is_null()) {
    r.revision = rev.is_string() ? rev.get<std::string>() : std::string();
    if (r.revision.size() != 40 || !is_hex(r.revision))
      fail(ErrorKind::kBadInput,
           "recipe {}: {}.revision must be null or a 40-digit lowercase commit hash", file, key);
  }
  if (files_optional && !j.contains("files")) return r;
  const Json& files = member(j, "files", key, file);
  if (files_optional)
    fail(ErrorKind::kBadInput,
         "recipe {}: a full-weight recipe pins no {} files (the checkpoint holds the whole "
         "backbone); remove {}.files",
         file, key, key);
  if (!files.is_object() || files.empty())
    fail(ErrorKind::kBadInput, "recipe {}: {}.files must be a non-empty object", file, key);
  for (const auto& [name, hash] : files.items()) {
    if (!is_plain_file_name(name))
      fail(ErrorKind::kBadInput, "recipe {}: {}.files has an unsafe file name \"{}\"", file, key,
           name);
    if (hash.is_null()) {
      r.files[name] = std::nullopt;
    } else if (hash.is_string() && is_sha256_hex(hash.get<std::string>())) {
      r.files[name] = hash.get<std::string>();
    } else {
      fail(ErrorKind::kBadInput,
           "recipe {}: {}.files[\"{}\"] must be null or a 64-digit lowercase SHA-256", file, key,
           name);
    }
  }
  return r;
}

Json repo_json(const PinnedRepo& r, bool with_files = true) {
  Json files = Json::object();
  for (const auto& [name, hash] : r.files) files[name] = hash ? Json(*hash) : Json(nullptr);
  Json j = {{"repo", r.repo}, {"revision", r.revision.empty() ? Json(nullptr) : Json(r.revision)}};
  if (with_files) j["files"] = files;
  return j;
}

}  // namespace

bool is_plain_file_name(std::string_view name) {
  if (name.empty() || name.size() > 255 || name[0] == '.') return false;
  for (char c : name)
    if (c == '/' || c == '\\' || c == '\0' || static_cast<unsigned char>(c) < 0x20) return false;
  return true;
}

Recipe parse_recipe(std::string_view text, const std::string& file) {
  Json root = Json::parse(text, nullptr, false);
  if (root.is_discarded() || !root.is_object())
    fail(ErrorKind::kBadInput, "recipe {} is not a JSON object", file);
  Recipe r;
  r.format = string_member(root, "format", "the recipe", file);
  if (r.format != kRecipeFormat)
    fail(ErrorKind::kUnsupported, "recipe {} has format \"{}\"; this kev reads \"{}\"", file,
         r.format, kRecipeFormat);
  r.model = string_member(root, "model", "the recipe", file);
  if (auto w = root.find("weights"); w != root.end()) {
    if (*w != "lora" && *w != "full")
      fail(ErrorKind::kBadInput, "recipe {}: \"weights\" must be \"lora\" or \"full\"", file);
    r.weights = w->get<std::string>();
  }
  const bool full = r.weights == "full";
  r.base = parse_repo(root, "base", file, full);
  r.checkpoint = parse_repo(root, "checkpoint", file);
  const Json& ref = member(root, "reference", "the recipe", file);
  if (!ref.is_object()) fail(ErrorKind::kBadInput, "recipe {}: reference must be an object", file);
  r.reference_repo = string_member(ref, "repo", "reference", file);
  r.reference_revision = string_member(ref, "revision", "reference", file);
  if (r.reference_revision.size() < 7 || r.reference_revision.size() > 40 ||
      !is_hex(r.reference_revision))
    fail(ErrorKind::kBadInput, "recipe {}: reference.revision must be a (short) commit hash", file);
  if (full) {
    if (root.contains("lora"))
      fail(ErrorKind::kBadInput,
           "recipe {}: a full-weight recipe has no \"lora\" section (nothing is merged)", file);
    for (const char* f : kRequiredFullCheckpointFiles)
      if (!r.checkpoint.files.count(f))
        fail(ErrorKind::kBadInput, "recipe {} does not list checkpoint file {}", file, f);
    for (const char* f : {"adapter_config.json", "adapter_model.safetensors"})
      if (r.checkpoint.files.count(f))
        fail(ErrorKind::kBadInput,
             "recipe {} says \"weights\": \"full\" but pins checkpoint file {}; a full-weight "
             "checkpoint has no adapter",
             file, f);
    return r;
  }
  const Json& lora = member(root, "lora", "the recipe", file);
  auto positive_int = [&](const char* key) {
    const Json& v = member(lora, key, "lora", file);
    if (!v.is_number_integer() || v.get<int64_t>() <= 0)
      fail(ErrorKind::kBadInput, "recipe {}: lora.{} must be a positive integer", file, key);
    return v.get<int64_t>();
  };
  r.rank = positive_int("rank");
  r.targets = positive_int("targets");
  const Json& alpha = member(lora, "alpha", "lora", file);
  if (!alpha.is_number() || !std::isfinite(alpha.get<double>()) || alpha.get<double>() <= 0)
    fail(ErrorKind::kBadInput, "recipe {}: lora.alpha must be a positive number", file);
  r.alpha = alpha.get<double>();
  for (const char* f : kRequiredBaseFiles)
    if (!r.base.files.count(f))
      fail(ErrorKind::kBadInput, "recipe {} does not list base file {}", file, f);
  for (const char* f : kRequiredCheckpointFiles)
    if (!r.checkpoint.files.count(f))
      fail(ErrorKind::kBadInput, "recipe {} does not list checkpoint file {}", file, f);
  return r;
}

Recipe load_recipe(const std::string& path) {
  return parse_recipe(read_file(path), path);
}

std::string recipe_to_json(const Recipe& r) {
  if (r.weights == "full") {
    Json root = {{"format", r.format},
                 {"model", r.model},
                 {"weights", "full"},
                 {"base", repo_json(r.base, false)},
                 {"checkpoint", repo_json(r.checkpoint)},
                 {"reference", {{"repo", r.reference_repo}, {"revision", r.reference_revision}}}};
    return root.dump(2) + "\n";
  }
  Json lora = {{"rank", r.rank}, {"targets", r.targets}};
  if (r.alpha == std::floor(r.alpha) && std::abs(r.alpha) < 1e15)
    lora["alpha"] = static_cast<int64_t>(r.alpha);
  else
    lora["alpha"] = r.alpha;
  Json root = {{"format", r.format},
               {"model", r.model},
               {"base", repo_json(r.base)},
               {"checkpoint", repo_json(r.checkpoint)},
               {"reference", {{"repo", r.reference_repo}, {"revision", r.reference_revision}}},
               {"lora", lora}};
  return root.dump(2) + "\n";
}

void require_fully_pinned(const Recipe& r, const std::string& recipe_path) {
  for (const auto* repo : {&r.base, &r.checkpoint}) {
    const char* side = repo == &r.base ? "base" : "checkpoint";
    if (repo == &r.base && r.weights == "full") continue;  // identity only: nothing is read
    if (repo->revision.empty())
      fail(ErrorKind::kBadInput,
           "recipe {} does not pin the {} revision of {} (it is null); run `kev pin --base DIR "
           "--checkpoint DIR --out RECIPE` on a trusted download (a Hugging Face cache "
           "snapshot, or name the revision with --{}-revision)",
           recipe_path, side, repo->repo, side);
    for (const auto& [name, hash] : repo->files)
      if (!hash)
        fail(ErrorKind::kBadInput,
             "recipe {} does not pin {}/{} (its SHA-256 is null); run `kev pin --base DIR "
             "--checkpoint DIR --out RECIPE` on a trusted download first",
             recipe_path, side, name);
  }
}

}  // namespace kev
