// What the weights sources share (weights_source.h): the indexed shards, opened and checked.
#include "export/weights_source.h"

#include "kev/core/error.h"
#include "kev/export/full_weights.h"
#include "kev/formats/torch_checkpoint.h"

namespace kev {

PyValue read_head_fields(PlannedInputs& p, const std::string& checkpoint_dir, const char* form) {
  const std::string head_path = checkpoint_dir + "/head.pt";
  PyValue head_pt = read_torch_checkpoint_bytes(p.inputs.bytes("checkpoint/head.pt"), head_path);
  p.fields = read_checkpoint_fields(head_pt, head_path);
  if (p.fields.weights != form) refuse_form_mismatch(checkpoint_dir, p.fields.weights, form);
  return head_pt;
}

std::map<std::string, const TensorInfo*> open_indexed_shards(PlannedInputs& p,
                                                             const std::string& dir,
                                                             const std::string& role,
                                                             const std::string& recipe_path) {
  const PinnedRepo& pins = role == "base" ? p.recipe.base : p.recipe.checkpoint;
  for (const auto& shard : p.index.shards) {
    if (!pins.files.count(shard))
      fail(ErrorKind::kBadInput,
           "the {} index uses shard {} but recipe {} does not pin it; run `kev pin` on a "
           "trusted download",
           role, shard, recipe_path);
    p.shards.push_back(std::make_unique<SafetensorsFile>(dir + "/" + shard));
  }
  // Shards are mapped by path again: make sure each is still the file that was hashed.
  p.inputs.check_unchanged();
  std::map<std::string, const TensorInfo*> tensors;
  for (size_t s = 0; s < p.shards.size(); ++s)
    for (const auto& t : p.shards[s]->tensors()) {
      auto it = p.index.weight_map.find(t.name);
      if (it == p.index.weight_map.end() || it->second != p.index.shards[s])
        fail(ErrorKind::kBadInput, "{} shard {} holds {}, which the index {}", role,
             p.index.shards[s], t.name,
             it == p.index.weight_map.end() ? "does not list" : "assigns to " + it->second);
      tensors[t.name] = &t;
    }
  for (const auto& [name, shard] : p.index.weight_map)
    if (!tensors.count(name))
      fail(ErrorKind::kBadInput, "the {} index assigns {} to {} but that shard does not hold it",
           role, name, shard);
  return tensors;
}

}  // namespace kev
