// Full-weight checkpoints (head.pt "weights": "full"): a fully fine-tuned Qwen3.5 text backbone
// shipped as its own shards (Kev 1.0's Kev-27B v2), checked as upstream's loaders check it and
// never merged or converted.
//
// The layout (save_pretrained of transformers' Qwen3_5TextModel in bfloat16): config.json with
// top-level model_type "qwen3_5_text" (no text_config) and dtype "bfloat16";
// model.safetensors.index.json plus shards model*.safetensors; tensor names without prefix
// (embed_tokens.weight, layers.N.*, norm.weight; no lm_head, vision tower or MTP); tokenizer.json
// and tokenizer_config.json; head.pt with weights "full", lora 0, weights_dtype "bf16".
//
// checkpoint_form_from_files(dir): upstream's rule, "lora" when adapter_config.json is there,
//   else "full" when config.json and a model*.safetensors are, else "" (neither).
// parse_full_config: config.json as above -> the text settings (Error kUnsupported naming
//   model_type / text_config / dtype when it is another layout or dtype; kBadInput otherwise).
// full_expected_tensors: every tensor the backbone has, name -> shape, for that config.
// check_full_tensors: every tensor of the shards (name -> where) exactly once, each expected,
//   BF16 and of the expected shape (conv kernels [C, 1, K]), none missing. Refusals name the
//   tensor: a prefixed or unexpected name, a missing one, a wrong shape (kBadInput), another
//   dtype (kUnsupported: kev runs the checkpoint's bytes as stored and converts nothing).
// full_weights_sha256(shard -> sha256): upstream's provenance digest, the SHA-256 of the lines
//   "<shard file name>:<shard sha256>\n" in ascending order of file name.
#pragma once
#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "kev/export/configs.h"
#include "kev/formats/safetensors.h"

namespace kev {

inline constexpr const char* kFullModelType = "qwen3_5_text";

std::string checkpoint_form_from_files(const std::string& dir);

struct FullConfig {
  BaseTextConfig text;
  int64_t vocab = 0, conv_kernel = 0;
};
FullConfig parse_full_config(std::string_view json, const std::string& name);

std::map<std::string, std::vector<int64_t>> full_expected_tensors(const FullConfig& config);

// shards: the index's shard files, opened; name_of_shard: their file names (same order).
void check_full_tensors(const FullConfig& config, const std::vector<const SafetensorsFile*>& shards,
                        const std::vector<std::string>& shard_names, const std::string& dir);

std::string full_weights_sha256(const std::map<std::string, std::string>& shard_digests);

// A recipe-side refusal when head.pt's "weights" and the files disagree (upstream's message).
[[noreturn]] void refuse_form_mismatch(const std::string& dir, const std::string& head_says,
                                       const std::string& files_hold);

}  // namespace kev
