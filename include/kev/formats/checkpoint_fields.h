// The inference-relevant fields of a Kev checkpoint, checked against what kev-native
// implements, and their record in an export bundle's manifest (docs/bundle-format.md,
// "Checkpoint fields"). A checkpoint or bundle that says anything else is refused, never run.
//
// read_checkpoint_fields(head.pt's top-level dict): every key must be one of
//   - the head and its settings: head, temperature, head_dim (validated by extract_head), lora
//     (the adapter rank: an int, compared with adapter_config.json's r by the caller);
//   - identity: base (str), base_revision (str or None); the recipe pins the base itself;
//   - an inference field, absent (upstream's default) or exactly a value kev implements:
//     option_isolation False, special_embeddings False, weights "lora" or "full", weights_dtype
//     "fp32" or "bf16" (only "bf16" with weights "full", whose lora must be 0), multimodal False,
//     quantization None;
//   - provenance (kProvenanceKeys: args, holdout, suite_sha256, init_source, temperature_fit,
//     snapshot), accepted whatever it holds.
// Anything else throws Error(kUnsupported) with one sentence naming the key, its value and what
// kev supports: a key kev does not know might change inference, so it is refused, not ignored.
// A non-dict top level or a non-str key is Error(kBadInput).
//
// check_bundle_supported(manifest, path): what a bundle reader (the pointer head's loader, so
// kev score, kev serve and kev head) accepts. Keys the manifest omits are not checked (minimal
// and older manifests), but every key present must be one this kev knows, "format" must be
// kBundleFormatTag, "weights" (the form) "lora" or "full" (absent: "lora"), "checkpoint_fields"
// must hold only known fields at supported values (its "weights" equal to the form) and
// "dtypes" only the dtypes kev runs; otherwise Error(kUnsupported) naming the key and value
// (a bundle written by a newer kev, or edited). A non-object manifest is Error(kBadInput).
#pragma once
#include <nlohmann/json_fwd.hpp>

#include <cstdint>
#include <optional>
#include <string>

#include "kev/formats/torch_checkpoint.h"

namespace kev {

// The schema tag of an export bundle (kev/export/bundle.h's kBundleFormat is this one).
inline constexpr const char* kBundleFormatTag = "kev-4b-merged/1";

// head.pt keys that record how a checkpoint was trained and never change inference.
inline constexpr const char* kProvenanceKeys[] = {"args",        "holdout",         "suite_sha256",
                                                  "init_source", "temperature_fit", "snapshot"};

struct CheckpointFields {
  bool option_isolation = false;       // isolated option spans (own mask and positions): refused
  bool special_embeddings = false;     // trained delimiter embedding rows: refused
  std::string weights = "lora";        // "lora" or "full" (a fully fine-tuned backbone)
  std::string weights_dtype = "fp32";  // "fp32" or "bf16" (merged alike; bundle-format.md)
  bool multimodal = false;             // refused
  std::optional<int64_t> lora;         // head.pt's adapter rank, where it says
};

// root: head.pt's top-level dict; name: for messages (the file's path).
CheckpointFields read_checkpoint_fields(const PyValue& root, const std::string& name);

// The manifest's "checkpoint_fields" object: the head.pt fields above as exported (defaults
// filled in), quantization null, and adapter_config.json's trainable_token_indices null.
nlohmann::json checkpoint_fields_json(const CheckpointFields& fields);

void check_bundle_supported(const nlohmann::ordered_json& manifest, const std::string& path);

}  // namespace kev
