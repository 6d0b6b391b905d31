// The export bundle's schema (docs/bundle-format.md) and the pieces that read or write it.
//
// A bundle directory holds: config.json, tokenizer.json, tokenizer_config.json (copied from the
// base), the base's shard files (same names and tensor-to-shard assignment, LoRA targets merged
// to BF16; for a full-weight checkpoint its own files, config and shards byte for byte),
// model.safetensors.index.json, head.safetensors (F32 q.weight [p,d], q.bias [p],
// k.weight [p,d], k.bias [p]) and kev_export.json, the manifest, written last. The calibration
// temperature lives in the manifest under "temperature"; the delimiter token ids under
// "delimiters"; head.pt's inference fields under "checkpoint_fields" (formats/checkpoint_fields.h).
//
// extract_head validates the head.pt dict (Error kBadInput naming the key at fault).
// verify_bundle re-hashes every output named by the manifest and refuses (Error kIntegrity,
// listing every problem) a mismatch, a missing file or a file the manifest does not name.
#pragma once
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "kev/formats/bundle_manifest.h"
#include "kev/formats/checkpoint_fields.h"
#include "kev/formats/torch_checkpoint.h"

namespace kev {

inline constexpr const char* kBundleFormat = kBundleFormatTag;
inline constexpr const char* kHeadFile = "head.safetensors";
inline constexpr const char* kIndexFile = "model.safetensors.index.json";
inline constexpr const char* kCopiedBaseFiles[] = {"config.json", "tokenizer.json",
                                                   "tokenizer_config.json"};
inline constexpr const char* kHeadTensorNames[] = {"q.weight", "q.bias", "k.weight", "k.bias"};
inline constexpr const char* kProducerName = "kev-native";

struct HeadWeights {
  int64_t pointer = 0, hidden = 0;
  // Row-major F32 values of q.weight, q.bias, k.weight, k.bias (kHeadTensorNames order).
  std::vector<float> tensors[4];
  double temperature = 1.0;
};

// root: head.pt's top-level dict. hidden: the base config's hidden size.
HeadWeights extract_head(const PyValue& root, int64_t hidden, const std::string& name);

// Writes head.safetensors; returns its SHA-256.
std::string write_head_safetensors(const std::string& path, const HeadWeights& head);

// Throws Error(kIntegrity) listing every mismatch / missing / extra file; returns the number
// of files checked.
size_t verify_bundle(const std::string& dir);

}  // namespace kev
