#include "kev/export/pin.h"

#include <fcntl.h>
#include <openssl/evp.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>

#include <exception>
#include <filesystem>
#include <memory>
#include <regex>
#include <utility>

#include "kev/core/error.h"
#include "kev/core/file.h"
#include "kev/core/sha256.h"
#include "kev/export/bundle.h"
#include "kev/export/configs.h"
#include "kev/export/family.h"
#include "kev/export/full_weights.h"
#include "kev/export/inventory.h"
#include "kev/formats/checkpoint_fields.h"
#include "kev/formats/torch_checkpoint.h"

namespace kev {
namespace {

namespace fs = std::filesystem;

struct Snapshot {
  bool is_snapshot = false;
  std::string repo, revision;
};

Snapshot detect_snapshot(const std::string& dir) {
  std::error_code ec;
  fs::path p = fs::weakly_canonical(fs::absolute(dir), ec);
  if (ec) return {};
  static const std::regex kRev("[0-9a-f]{40}");
  std::string rev = p.filename().string();
  fs::path snapshots = p.parent_path();
  std::string repo_dir = snapshots.parent_path().filename().string();
  if (!std::regex_match(rev, kRev) || snapshots.filename() != "snapshots" ||
      repo_dir.rfind("models--", 0) != 0)
    return {};
  std::string rest = repo_dir.substr(8);
  auto sep = rest.find("--");
  if (sep == std::string::npos) return {};
  return {true, rest.substr(0, sep) + "/" + rest.substr(sep + 2), rev};
}

bool is_hex_of_length(const std::string& s, size_t n) {
  if (s.size() != n) return false;
  for (char c : s)
    if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'))) return false;
  return true;
}

// Hashes dir/name; cross-checks a cache blob name when the file is a symlink into blobs/.
std::string hash_and_cross_check(const std::string& dir, const std::string& name,
                                 const std::string& key, size_t& cross_checked) {
  std::string path = dir + "/" + name;
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0 || !S_ISREG(st.st_mode))
    fail(ErrorKind::kIo, "{} ({}) is missing or not a regular file", key, path);
  std::string digest = sha256_file(path);
  std::error_code ec;
  if (fs::is_symlink(path, ec)) {
    fs::path target = fs::read_symlink(path, ec);
    std::string blob = target.filename().string();
    if (!ec && target.parent_path().filename() == "blobs") {
      if (is_hex_of_length(blob, 64)) {
        if (blob != digest)
          fail(ErrorKind::kIntegrity,
               "{} ({}) has SHA-256 {} but its Hugging Face cache blob is "
               "named {}; the download is corrupt, fetch it again",
               key, path, digest, blob);
        ++cross_checked;
      } else if (is_hex_of_length(blob, 40)) {
        std::string sha1 = git_blob_sha1(read_file(path));
        if (blob != sha1)
          fail(ErrorKind::kIntegrity,
               "{} ({}) has git blob SHA-1 {} but its Hugging Face cache "
               "blob is named {}; the download is corrupt, fetch it again",
               key, path, sha1, blob);
        ++cross_checked;
      }
    }
  }
  return digest;
}

// Removes a temporary file on every way out (a failed write or fsync included) unless kept.
struct TempFile {
  std::string path;
  bool keep = false;
  ~TempFile() {
    if (!keep) ::unlink(path.c_str());
  }
};

// Renames tmp to out, never replacing an existing out. RENAME_NOREPLACE makes the check and
// the rename one step; filesystems without it (EINVAL) or old kernels (ENOSYS) fall back to a
// check followed by rename, which leaves a small race.
void publish_no_replace(const std::string& tmp, const std::string& out) {
  if (::renameat2(AT_FDCWD, tmp.c_str(), AT_FDCWD, out.c_str(), RENAME_NOREPLACE) == 0) return;
  int err = errno;
  if (err == EINVAL || err == ENOSYS) {
    if (path_exists(out))
      err = EEXIST;
    else if (::rename(tmp.c_str(), out.c_str()) == 0)
      return;
    else
      err = errno;
  }
  if (err == EEXIST)
    fail(ErrorKind::kBadInput, "{} already exists; kev pin never overwrites a recipe", out);
  fail(ErrorKind::kIo, "cannot create {}: {}", out, std::strerror(err));
}

// The checkpoint side's revision: given, from a snapshot path, or the release's; refuses none.
void settle_revision(PinnedRepo& repo, const std::string& dir, const std::string& given,
                     const char* side, const std::string& model, PinSummary& s) {
  if (!given.empty()) {
    if (!is_hex_of_length(given, 40))
      fail(ErrorKind::kBadInput, "--{}-revision must be a 40-digit lowercase commit hash", side);
    if (!repo.revision.empty() && given != repo.revision)
      s.notes.push_back(fmt::format("{} revision {} given; the release revision of {} is {}", side,
                                    given, repo.repo, repo.revision));
    repo.revision = given;
  }
  Snapshot snap = detect_snapshot(dir);
  if (snap.is_snapshot && !given.empty() && snap.revision != given)
    fail(ErrorKind::kBadInput, "{} is a cache snapshot of revision {}, not the --{}-revision {}",
         dir, snap.revision, side, given);
  if (snap.is_snapshot) {
    if (!repo.revision.empty() && snap.repo != repo.repo)
      s.notes.push_back(fmt::format("{} is a cache snapshot of {}, not {}; recording {}", dir,
                                    snap.repo, repo.repo, snap.repo));
    if (!repo.revision.empty() && snap.revision != repo.revision)
      s.notes.push_back(fmt::format("{} is revision {} of {}, not the release revision {}", dir,
                                    snap.revision, snap.repo, repo.revision));
    repo.repo = snap.repo;
    repo.revision = snap.revision;
  }
  if (repo.revision.empty())
    fail(ErrorKind::kBadInput,
         "the release revision of {} is not known to kev ({} leaves it null: no full commit "
         "was confirmed); pin from a Hugging Face cache snapshot "
         "(.../models--ORG--NAME/snapshots/<commit>/), whose path names the revision, or "
         "name it with --{}-revision",
         repo.repo, model, side);
}

// The member a checkpoint is, told from its files (PinOptions::model empty): its form, then the
// config.json of its backbone, hashed (and cross-checked in a cache snapshot) before it is
// parsed. Returns the member and that config.json's SHA-256, which the pinned one must equal.
std::pair<const FamilyMember*, std::string> member_from_checkpoint(const PinOptions& o,
                                                                   PinSummary& s) {
  const std::string form = checkpoint_form_from_files(o.checkpoint_dir);
  if (form.empty())
    fail(ErrorKind::kBadInput,
         "{} holds neither adapter_config.json (a LoRA checkpoint) nor config.json with "
         "model*.safetensors shards (a full-weight checkpoint), so kev pin cannot tell the family "
         "member from it; pin the whole download, or name the member with --model",
         o.checkpoint_dir);
  const bool full = form == "full";
  if (!full && o.base_dir.empty())
    fail(ErrorKind::kBadInput,
         "{} holds adapter_config.json, a LoRA checkpoint: --base (the base model directory its "
         "adapter is merged into) is required",
         o.checkpoint_dir);
  const std::string& dir = full ? o.checkpoint_dir : o.base_dir;
  const std::string name = dir + "/config.json";
  size_t cross_checked = 0;  // counted when the file is pinned below
  const std::string digest = hash_and_cross_check(
      dir, "config.json", full ? "checkpoint/config.json" : "base/config.json", cross_checked);
  const std::string bytes = read_file(name);
  if (sha256_hex(bytes) != digest) fail(ErrorKind::kIntegrity, "{} changed while pinning", name);
  const BaseTextConfig config =
      full ? parse_full_config(bytes, name).text : parse_base_text_config(bytes, name);
  const FamilyMember& member = member_from_config(form, config, name);
  s.member = full ? fmt::format("{} (full weights, {}) from the checkpoint's config.json",
                                member.model, describe_config(config))
                  : fmt::format("{} (a LoRA adapter on a base of {}) from the base's config.json",
                                member.model, describe_config(config));
  return {&member, digest};
}

// --model wins, but a config that is exactly another member's is worth a word.
void note_other_member(const FamilyMember& named, const BaseTextConfig& config,
                       const std::string& name, PinSummary& s) {
  if (is_member_config(named, config)) return;
  for (const auto& m : kev_family())
    if (m.weights == named.weights && is_member_config(m, config))
      s.notes.push_back(fmt::format("{} is {}'s {}({}), not {}'s; pinned as {}, as --model says",
                                    name, m.model, m.weights == "full" ? "config " : "base ",
                                    describe_config(config), named.model, named.model));
}

// A full-weight checkpoint (Kev 1.0's Kev-27B): no base, the checkpoint pins its own config,
// tokenizer, index, shards and head.pt; every check `kev export` makes runs here first.
// decided_config: the SHA-256 of the config.json the member was told from ("" for --model).
PinSummary run_pin_full(const PinOptions& o, PinSummary s, const std::string& decided_config) {
  Recipe& r = s.recipe;
  const FamilyMember& member = *find_member(r.model);
  if (!o.base_dir.empty())
    s.notes.push_back(fmt::format(
        "{} is a full-weight checkpoint: --base {} is not read (the checkpoint holds the whole "
        "backbone and its tokenizer)",
        member.display, o.base_dir));
  if (!o.base_revision.empty())
    s.notes.push_back("--base-revision is not used for a full-weight checkpoint");
  const std::string form = checkpoint_form_from_files(o.checkpoint_dir);
  if (form == "lora")
    fail(ErrorKind::kBadInput,
         "{} holds adapter_config.json, a LoRA checkpoint, but {} ({}) ships full weights; for "
         "Kev-27B's LoRA release (the Hub tag v1-lora) pass --model kev-27b-v1-lora",
         o.checkpoint_dir, member.display, r.model);
  const std::string head_path = o.checkpoint_dir + "/head.pt";
  std::string head_bytes = read_file(head_path);
  PyValue head_pt = read_torch_checkpoint_bytes(head_bytes, head_path);
  CheckpointFields fields = read_checkpoint_fields(head_pt, head_path);
  if (fields.weights != "full") refuse_form_mismatch(o.checkpoint_dir, fields.weights, form);
  if (form != "full") refuse_form_mismatch(o.checkpoint_dir, fields.weights, form);
  const std::string index_path = o.checkpoint_dir + "/model.safetensors.index.json";
  std::string index_bytes = read_file(index_path);
  BaseIndex index = parse_base_index(index_bytes, index_path);
  for (const auto& shard : index.shards) r.checkpoint.files[shard] = std::nullopt;
  std::error_code ec;
  for (const auto& e : std::filesystem::directory_iterator(o.checkpoint_dir, ec)) {
    const std::string n = e.path().filename().string();
    if (n.starts_with("model") && n.ends_with(".safetensors") && !r.checkpoint.files.count(n))
      fail(ErrorKind::kBadInput,
           "{}: {} is not named by model.safetensors.index.json; upstream loads and hashes every "
           "model*.safetensors of a full-weight checkpoint, so remove it or fix the index",
           o.checkpoint_dir, n);
  }
  settle_revision(r.checkpoint, o.checkpoint_dir, o.checkpoint_revision, "checkpoint", r.model, s);
  for (auto& [name, hash] : r.checkpoint.files) {
    hash = hash_and_cross_check(o.checkpoint_dir, name, "checkpoint/" + name, s.cross_checked);
    ++s.files;
  }
  if (sha256_hex(index_bytes) != *r.checkpoint.files["model.safetensors.index.json"] ||
      sha256_hex(head_bytes) != *r.checkpoint.files["head.pt"])
    fail(ErrorKind::kIntegrity, "{}: the index or head.pt changed while pinning", o.checkpoint_dir);
  std::string config_bytes = read_file(o.checkpoint_dir + "/config.json");
  if (sha256_hex(config_bytes) != *r.checkpoint.files["config.json"] ||
      (!decided_config.empty() && decided_config != *r.checkpoint.files["config.json"]))
    fail(ErrorKind::kIntegrity, "{}/config.json changed while pinning", o.checkpoint_dir);
  FullConfig config = parse_full_config(config_bytes, o.checkpoint_dir + "/config.json");
  note_other_member(member, config.text, o.checkpoint_dir + "/config.json", s);
  if (config.text.full_attention != member.config.full_attention)
    fail(ErrorKind::kBadInput,
         "{}/config.json has {} layers of another layout than {} ({} layers, full attention on "
         "every fourth); it is not that member's checkpoint",
         o.checkpoint_dir, config.text.layers, member.display, member.config.layers);
  std::vector<std::unique_ptr<SafetensorsFile>> shards;
  std::vector<const SafetensorsFile*> opened;
  for (const auto& shard : index.shards) {
    shards.push_back(std::make_unique<SafetensorsFile>(o.checkpoint_dir + "/" + shard));
    opened.push_back(shards.back().get());
    for (const auto& t : shards.back()->tensors()) {
      auto it = index.weight_map.find(t.name);
      if (it == index.weight_map.end() || it->second != shard)
        fail(ErrorKind::kBadInput, "checkpoint shard {} holds {}, which the index {}", shard,
             t.name, it == index.weight_map.end() ? "does not list" : "assigns to " + it->second);
    }
  }
  check_full_tensors(config, opened, index.shards, o.checkpoint_dir);
  extract_head(head_pt, config.text.hidden, head_path);
  std::string tmp = fmt::format("{}.kev-pin.{}", o.out_path, ::getpid());
  TempFile guard{tmp};
  write_file_synced(tmp, recipe_to_json(r));
  publish_no_replace(tmp, o.out_path);
  guard.keep = true;
  return s;
}

}  // namespace

std::string git_blob_sha1(std::string_view bytes) {
  std::string header = "blob " + std::to_string(bytes.size());
  header.push_back('\0');
  unsigned char md[EVP_MAX_MD_SIZE];
  unsigned int len = 0;
  EVP_MD_CTX* ctx = EVP_MD_CTX_new();
  if (!ctx || EVP_DigestInit_ex(ctx, EVP_sha1(), nullptr) != 1 ||
      EVP_DigestUpdate(ctx, header.data(), header.size()) != 1 ||
      EVP_DigestUpdate(ctx, bytes.data(), bytes.size()) != 1 ||
      EVP_DigestFinal_ex(ctx, md, &len) != 1) {
    EVP_MD_CTX_free(ctx);
    fail(ErrorKind::kInternal, "SHA-1 failed");
  }
  EVP_MD_CTX_free(ctx);
  static const char* kHex = "0123456789abcdef";
  std::string out;
  for (unsigned i = 0; i < len; ++i) {
    out.push_back(kHex[md[i] >> 4]);
    out.push_back(kHex[md[i] & 15]);
  }
  return out;
}

Recipe known_recipe(const std::string& model) {
  const FamilyMember* m = find_member(model);
  if (!m) {
    std::string names;
    for (const auto& f : kev_family()) names += (names.empty() ? "" : ", ") + f.model;
    fail(ErrorKind::kUnsupported, "kev pin knows models {}; \"{}\" has no built-in recipe", names,
         model);
  }
  Recipe r;
  r.model = m->model;
  r.base.repo = m->base_repo;
  r.base.revision = m->base_revision;
  r.checkpoint.repo = m->checkpoint_repo;
  r.checkpoint.revision = m->checkpoint_revision;
  r.reference_repo = m->reference_repo;
  r.reference_revision = m->reference_revision;
  r.weights = m->weights;
  if (r.weights == "full") {
    for (const char* f : kRequiredFullCheckpointFiles) r.checkpoint.files[f] = std::nullopt;
    return r;
  }
  r.rank = m->rank;
  r.alpha = m->alpha;
  r.targets = member_counts(*m).total();
  for (const char* f : kRequiredBaseFiles) r.base.files[f] = std::nullopt;
  for (const char* f : kRequiredCheckpointFiles) r.checkpoint.files[f] = std::nullopt;
  return r;
}

PinSummary run_pin(const PinOptions& options) {
  PinSummary s;
  PinOptions o = options;
  std::string decided_config;  // SHA-256 of the config.json the member was told from
  if (o.model.empty()) {
    if (path_exists(o.out_path))
      fail(ErrorKind::kBadInput, "{} already exists; kev pin never overwrites a recipe",
           o.out_path);
    auto [member, digest] = member_from_checkpoint(o, s);
    o.model = member->model;
    decided_config = digest;
  }
  s.recipe = known_recipe(o.model);
  if (path_exists(o.out_path))
    fail(ErrorKind::kBadInput, "{} already exists; kev pin never overwrites a recipe", o.out_path);
  if (s.recipe.weights == "full") return run_pin_full(o, std::move(s), decided_config);
  Recipe& r = s.recipe;
  const FamilyMember& member = *find_member(r.model);
  if (o.base_dir.empty())
    fail(ErrorKind::kBadInput,
         "{} is a LoRA checkpoint: --base (the base model directory its adapter is merged into) "
         "is required",
         member.display);
  if (std::string form = checkpoint_form_from_files(o.checkpoint_dir); form == "full")
    fail(ErrorKind::kBadInput,
         "{} holds backbone weights (config.json and shards) and no adapter, a full-weight "
         "checkpoint, but {} ({}) is a LoRA adapter; Kev 1.0's full-weight Kev-27B is --model "
         "kev-27b",
         o.checkpoint_dir, member.display, r.model);
  // head.pt's inference fields before anything else, so that a checkpoint kev cannot run is
  // refused by the field that says so (a fully fine-tuned one has no adapter files to hash).
  // Where head.pt is missing, hashing below says so; where it does not even parse, that is
  // reported after hashing, whose cache cross-check may explain it (a corrupt download).
  std::string head_bytes;
  CheckpointFields fields;
  std::exception_ptr malformed_head;
  const std::string head_path = o.checkpoint_dir + "/head.pt";
  if (struct stat st{}; ::stat(head_path.c_str(), &st) == 0 && S_ISREG(st.st_mode)) {
    head_bytes = read_file(head_path);
    try {
      fields =
          read_checkpoint_fields(read_torch_checkpoint_bytes(head_bytes, head_path), head_path);
    } catch (const Error& e) {
      if (e.kind() != ErrorKind::kBadInput) throw;
      malformed_head = std::current_exception();
    }
  }
  // Upstream's rule: the files decide the form; a head.pt that says otherwise is not theirs.
  if (!malformed_head && fields.weights != "lora")
    refuse_form_mismatch(o.checkpoint_dir, fields.weights,
                         checkpoint_form_from_files(o.checkpoint_dir));
  std::string index_bytes = read_file(o.base_dir + "/model.safetensors.index.json");
  BaseIndex index = parse_base_index(index_bytes, o.base_dir + "/model.safetensors.index.json");
  for (const auto& shard : index.shards) r.base.files[shard] = std::nullopt;
  for (auto* repo : {&r.base, &r.checkpoint}) {
    bool is_base = repo == &r.base;
    const std::string& dir = is_base ? o.base_dir : o.checkpoint_dir;
    const std::string& given = is_base ? o.base_revision : o.checkpoint_revision;
    const char* side = is_base ? "base" : "checkpoint";
    if (!given.empty()) {
      if (!is_hex_of_length(given, 40))
        fail(ErrorKind::kBadInput, "--{}-revision must be a 40-digit lowercase commit hash", side);
      if (!repo->revision.empty() && given != repo->revision)
        s.notes.push_back(fmt::format("{} revision {} given; the release revision of {} is {}",
                                      side, given, repo->repo, repo->revision));
      repo->revision = given;
    }
    Snapshot snap = detect_snapshot(dir);
    if (snap.is_snapshot && !given.empty() && snap.revision != given)
      fail(ErrorKind::kBadInput, "{} is a cache snapshot of revision {}, not the --{}-revision {}",
           dir, snap.revision, side, given);
    if (snap.is_snapshot && repo->revision.empty()) {
      repo->repo = snap.repo;
      repo->revision = snap.revision;
    } else if (snap.is_snapshot) {
      if (snap.repo != repo->repo)
        s.notes.push_back(fmt::format("{} is a cache snapshot of {}, not {}; recording {}", dir,
                                      snap.repo, repo->repo, snap.repo));
      if (snap.revision != repo->revision)
        s.notes.push_back(fmt::format("{} is revision {} of {}, not the release revision {}", dir,
                                      snap.revision, snap.repo, repo->revision));
      repo->repo = snap.repo;
      repo->revision = snap.revision;
    }
    if (repo->revision.empty())
      fail(ErrorKind::kBadInput,
           "the release revision of {} is not known to kev ({} leaves it null: no full commit "
           "was confirmed); pin from a Hugging Face cache snapshot "
           "(.../models--ORG--NAME/snapshots/<commit>/), whose path names the revision, or "
           "name it with --{}-revision",
           repo->repo, r.model, side);
    const std::string& prefix = is_base ? member.base_revision_prefix : std::string();
    if (!prefix.empty() && repo->revision.rfind(prefix, 0) != 0)
      s.notes.push_back(fmt::format("{} revision {} is not the {} the {} model card names", side,
                                    repo->revision, prefix, member.display));
    for (auto& [name, hash] : repo->files) {
      std::string key = std::string(is_base ? "base/" : "checkpoint/") + name;
      hash = hash_and_cross_check(dir, name, key, s.cross_checked);
      ++s.files;
    }
  }
  // The index we parsed must be the index we pinned.
  if (sha256_hex(index_bytes) != *r.base.files["model.safetensors.index.json"])
    fail(ErrorKind::kIntegrity, "{}/model.safetensors.index.json changed while pinning",
         o.base_dir);
  // The inventory the pinned configs define must be the member's (derived from its base config).
  std::string config_bytes = read_file(o.base_dir + "/config.json");
  std::string adapter_bytes = read_file(o.checkpoint_dir + "/adapter_config.json");
  if (sha256_hex(config_bytes) != *r.base.files["config.json"] ||
      (!decided_config.empty() && decided_config != *r.base.files["config.json"]) ||
      sha256_hex(adapter_bytes) != *r.checkpoint.files["adapter_config.json"])
    fail(ErrorKind::kIntegrity, "config.json or adapter_config.json changed while pinning");
  if (malformed_head) std::rethrow_exception(malformed_head);
  if (sha256_hex(head_bytes) != *r.checkpoint.files["head.pt"])
    fail(ErrorKind::kIntegrity, "{} changed while pinning", head_path);
  BaseTextConfig config = parse_base_text_config(config_bytes, o.base_dir + "/config.json");
  note_other_member(member, config, o.base_dir + "/config.json", s);
  LoraConfig lora = parse_lora_config(adapter_bytes, o.checkpoint_dir + "/adapter_config.json");
  if (fields.lora && *fields.lora != lora.rank)
    fail(ErrorKind::kBadInput,
         "{} says \"lora\" {} but adapter_config.json has r {}; they are not from one checkpoint",
         head_path, *fields.lora, lora.rank);
  if (lora.rank != r.rank || lora.alpha != r.alpha)
    fail(ErrorKind::kBadInput,
         "{}/adapter_config.json has r {} and lora_alpha {} but {} has {} and {}", o.checkpoint_dir,
         lora.rank, lora.alpha, member.display, r.rank, r.alpha);
  std::vector<LoraTarget> targets = expected_targets(config, lora);
  try {
    check_member_counts(member, targets);
  } catch (const Error& e) {
    std::string hint;
    for (const auto& m : kev_family())
      if (m.model != member.model && m.config.layers == config.layers &&
          static_cast<int64_t>(targets.size()) == member_counts(m).total())
        hint +=
            fmt::format("{}--model {}", hint.empty() ? "; for this layout pass " : " or ", m.model);
    fail(e.kind(), "{} (pinning as {}){}", e.what(), r.model, hint);
  }
  r.targets = static_cast<int64_t>(targets.size());
  std::string tmp = fmt::format("{}.kev-pin.{}", o.out_path, ::getpid());
  TempFile guard{tmp};
  write_file_synced(tmp, recipe_to_json(r));
  publish_no_replace(tmp, o.out_path);
  guard.keep = true;
  return s;
}

}  // namespace kev
