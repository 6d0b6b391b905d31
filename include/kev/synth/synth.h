// `kev synth`: writes a synthetic Kev checkpoint in the exact released layout (see
// docs/synth.md / the team spec): DIR/base (config.json, tokenizer.json, tokenizer_config.json,
// two safetensors shards + index) and DIR/checkpoint (adapter_config.json,
// adapter_model.safetensors, head.pt written with torch.save's format). With form "full": a
// full-weight checkpoint (Kev 1.0's Kev-27B layout) in DIR/checkpoint only: the text model's
// config.json (top-level model_type qwen3_5_text, dtype bfloat16), tokenizer files, index +
// shards model-0000N-of-00002.safetensors with unprefixed names, every tensor BF16, and head.pt
// (weights "full", lora 0, weights_dtype "bf16"). The base's F32 vectors (A_log, GDN norm) hold
// BF16-representable values, so a full checkpoint made from a LoRA one keeps them exactly.
//
// Contract: values are a pure function of (--seed, tensor name, element index), so any
// tensor can be regenerated independently and the output is identical across runs and
// thread counts. Shards are streamed in fixed-size chunks: peak memory does not depend on the
// model size. Output is staged beside DIR and published atomically; an existing DIR is
// refused (Error kBadInput).
#pragma once
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "kev/formats/qwen_config.h"
#include "kev/formats/safetensors.h"

namespace kev {

// The backbone's dimensions (0.8b and 4b: the published configs, formats/qwen_config.h) and what
// the checkpoint adds. full_attention stays empty: a synthetic model's layer kinds are
// is_full_attention_layer's, whatever its depth.
struct SynthShape : QwenTextDims {
  std::string name;   // "tiny", "tiny-0.8b", "tiny-27b", "0.8b", "4b"
  int64_t vocab = 0;  // 0: the tokenizer's size rounded up to a multiple of 64 (tiny)
  int64_t pointer = 0, rank = 16, alpha = 32;
  // head.pt's weights_dtype: "bf16" for tiny-27b (Kev-27B was trained on a bf16 backbone),
  // "fp32" for the others, as the released checkpoints say.
  std::string weights_dtype = "fp32";
};

// The registered shapes; throws Error(kBadInput) for an unknown name.
SynthShape synth_shape(std::string_view name);

struct SynthOptions {
  std::string out;
  SynthShape shape = synth_shape("tiny");
  uint64_t seed = 0;
  std::string tokenizer;  // empty: the built-in byte-level BPE
  double temperature = 2.406050072164233;
  std::string form = "lora";  // "lora" (base + adapter) or "full" (full weights, no base)
};

// Layer N is full attention when N % 4 == 3, linear (GDN) attention otherwise.
bool is_full_attention_layer(int64_t layer);

// The LoRA targets as base tensor names without the ".weight" suffix, e.g.
// "model.language_model.layers.0.linear_attn.in_proj_qkv", in layer order.
std::vector<std::string> lora_target_modules(const SynthShape& shape);

// Every base tensor (language model, visual, mtp) in canonical order.
std::vector<TensorSpec> synth_base_tensors(const SynthShape& shape);

// The built-in tokenizer.json (byte-level BPE trained at run time on an embedded text).
std::string default_tokenizer_json();

struct SynthSummary {
  int64_t vocab = 0;
  size_t base_tensors = 0, adapter_tensors = 0;
  uint64_t base_bytes = 0;
};

// Writes everything under options.out (validates the shape first: Error kBadInput).
SynthSummary synthesize(const SynthOptions& options);

}  // namespace kev
