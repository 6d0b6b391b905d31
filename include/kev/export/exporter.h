// `kev export`: recipe + base + checkpoint -> a published, hash-manifested bundle.
//
// Order: (1) parse the recipe and refuse unpinned files; (2) hash every pinned input before
// parsing any of them; (3) parse head.pt's inference fields (refusing any kev does not implement,
// formats/checkpoint_fields.h), configs, the base index and shard headers, the adapter and the
// head and validate the whole LoRA inventory; only then (4) create a staging directory beside
// `out`, stream every shard tensor by tensor (targets merged on all cores, everything else
// copied byte for byte, output hashed while written), write head, index, copies and the
// manifest last, fsync and rename into place. Any error or SIGINT/SIGTERM removes the staging
// directory; `out` never exists partially. Peak memory: a few chunk buffers plus one target's
// LoRA factors, independent of model size.
//
// A full-weight recipe ("weights": "full", export/full_weights.h) takes no base: after (1)-(2)
// the checkpoint's own config, index, shard headers and head are checked as upstream checks them,
// then each shard is copied byte for byte from its verified mapping (hashed while written; a
// digest other than the pinned one refuses the export), the small files are the verified bytes,
// and head.safetensors and the manifest (weights "full", weights_sha256) are written as above.
// Both forms run one pipeline; what differs is a weights source (src/export/weights_source.h).
#pragma once
#include <cstdint>
#include <string>

namespace kev {

struct ExportOptions {
  std::string recipe_path, base_dir, checkpoint_dir, out_dir;  // base_dir: LoRA recipes only
};

struct ExportSummary {
  std::string out_dir, model, merge_isa;
  size_t merged_targets = 0, tensors = 0, shards = 0;
  uint64_t input_bytes = 0, output_bytes = 0;
  double seconds = 0;
};

ExportSummary run_export(const ExportOptions& options);

}  // namespace kev
