#include "kev/export/pin.h"

#include <sys/stat.h>

#include <cstdio>

#include <exception>
#include <memory>
#include <utility>

#include "export/pin_files.h"
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
  if (!has_member_layout(member, config.text))
    fail(ErrorKind::kBadInput,
         "{}/config.json has {} layers of another layout than {} ({} layers, full attention on "
         "every fourth); it is not that member's checkpoint",
         o.checkpoint_dir, config.text.layers, member.display, member.config.layers);
  if (config.text.layers != member.config.layers)
    s.notes.push_back(
        fmt::format("KEV_PIN_DEPTH_PREFIX: the first {} of {}'s {} layers (a test "
                    "build's measurement of a prefix; no member's checkpoint)",
                    config.text.layers, member.display, member.config.layers));
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
  publish_recipe(r, o.out_path);
  return s;
}

}  // namespace

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
  publish_recipe(r, o.out_path);
  return s;
}

}  // namespace kev
