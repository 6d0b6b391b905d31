// Qwen3.5 text weights from a model directory (export bundle or base checkpoint).
//
// Contract: ModelWeights::load(dir) reads config.json, then model.safetensors.index.json plus
// its shards (or a single model.safetensors), memory-maps them and checks every language-model
// tensor for presence, shape and dtype against the config. Big matrices stay in the mapping
// (BF16, never copied); small vectors (norms, A_log, dt_bias, conv taps) are widened to owned
// F32 copies. Tensor names may carry the prefix `model.language_model.`, `model.` or none;
// `visual`/`mtp`/`lm_head` tensors are ignored; any other unexpected tensor under the language
// prefix is refused. Dtypes: matrices and the embedding must be BF16; the small vectors
// (A_log, dt_bias, GDN norm.weight, RMSNorm weights, conv1d taps) may be BF16 or F32 (the
// released base stores A_log and the GDN norm in F32, everything else in BF16).
//
// Quantized bundles (`kev quantize`, docs/bundle-format.md "Quantized bundles"): a projection may
// be stored in row parts instead of one BF16 tensor, `<name>@<r0>-<r1>.<kind>` for kind bf16
// (BF16 [n, cols]), q8 (I8 [n, blocks*32] plus `.scale` F32 [n, blocks]), q4 (U8
// [n, blocks*16] plus `.scale` F16 [n, blocks]), q5 (U8 [n, blocks*20] plus the same scales),
// q4z (U8 [n, blocks*18] plus `.scale` F16 [n, ceil(blocks/8)]) or q5z (U8 [n, blocks*22] plus
// q4z's scales); the parts must cover the rows in order, each
// of its shape and dtype. Such a projection's Bf16Matrix has data == nullptr (only its shape);
// stored() says how it is held, and only the int8 precision mode runs it.
// Errors: kBadInput naming the file and tensor.
#pragma once
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "kev/cpu/matrix.h"
#include "kev/formats/safetensors.h"
#include "kev/model/config.h"
#include "kev/model/quant_plan.h"

namespace kev {

struct AttentionWeights {
  Bf16Matrix q, k, v,
      o;  // q: [heads*head_dim*2, hidden], per head head_dim query rows then head_dim gate rows
  std::vector<float> q_norm, k_norm;
};

struct GdnWeights {
  Bf16Matrix qkv, z, a, b, out;
  std::vector<float> conv;  // [conv_dim, conv_kernel]
  std::vector<float> a_log, dt_bias, norm;
};

struct LayerWeights {
  bool full_attention = false;
  std::vector<float> input_norm, post_norm;
  Bf16Matrix gate, up, down;
  AttentionWeights attn;
  GdnWeights gdn;
};

// One stored row part of a projection in a quantized bundle: q points at its values (BF16 for
// an exact part), scale at its scales (q8, q4), both inside the mapping, possibly unaligned.
struct StoredPart {
  RowPart rows;
  const uint8_t* q = nullptr;
  const uint8_t* scale = nullptr;
};

class ModelWeights {
 public:
  static std::unique_ptr<ModelWeights> load(const std::string& model_dir);

  const ModelConfig& config() const { return config_; }
  const Bf16Matrix& embed() const { return embed_; }
  const std::vector<float>& final_norm() const { return final_norm_; }
  const std::vector<LayerWeights>& layers() const { return layers_; }
  const std::string& prefix() const { return prefix_; }
  // Drops the resident pages wholly inside m's BF16 data from this process (MADV_DONTNEED on
  // the read-only file mapping: a later read faults them back in from the file). For a mode
  // that keeps its own copy of m (--precision int8). No-op for a matrix not in a mapping.
  void release_pages(const Bf16Matrix& m) const;
  void release_bytes(const void* data, size_t bytes) const;  // the same for any mapped range

  // Every big projection by its tensor name without prefix (quant_plan.h's names).
  const std::map<std::string, const Bf16Matrix*>& projections() const { return projections_; }
  // The projections a quantized bundle stores in parts (empty for a BF16 bundle), by name.
  const std::map<std::string, std::vector<StoredPart>>& stored() const { return stored_; }
  bool quantized() const { return !stored_.empty(); }
  // The kinds a quantized bundle stores, "+"-joined in the order q4, q4z, q5, q5z, q8 (e.g.
  // "q4+q8"), or "bf16" where its parts are all BF16; "" for a BF16 bundle.
  std::string stored_kinds() const;

 private:
  ModelConfig config_;
  std::string prefix_;
  Bf16Matrix embed_;
  std::vector<float> final_norm_;
  std::vector<LayerWeights> layers_;
  std::vector<std::unique_ptr<SafetensorsFile>> files_;
  std::map<std::string, const Bf16Matrix*> projections_;
  std::map<std::string, std::vector<StoredPart>> stored_;
};

}  // namespace kev
