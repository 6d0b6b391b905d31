// kev quantize (quantize.h): a BF16 bundle's big projections re-stored at 8, 5 or 4 bits.
#include "kev/export/quantize.h"

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <map>
#include <memory>
#include <vector>

#include "kev/core/bf16.h"
#include "kev/core/error.h"
#include "kev/core/file.h"
#include "kev/core/interrupt.h"
#include "kev/core/progress.h"
#include "kev/core/sha256.h"
#include "kev/core/threads.h"
#include "kev/cpu/gemm_int8.h"
#include "kev/export/bundle.h"
#include "kev/export/inputs.h"
#include "kev/formats/bundle_manifest.h"
#include "kev/formats/safetensors.h"
#include "kev/model/quant_plan.h"
#include "kev/model/weights.h"

namespace kev {
namespace {

constexpr int64_t kRowsPerChunk = 256;      // rows quantized (in parallel) per write
constexpr uint64_t kCopyChunk = 16u << 20;  // bytes copied per write

int64_t blocks_of(int64_t cols) {
  return (cols + kQuantBlock - 1) / kQuantBlock;
}

// The shard files of a bundle in the order they are written: the index's shards by name, or
// the single model.safetensors.
std::vector<std::string> shard_names(const std::string& dir) {
  const std::string index = dir + "/" + kIndexFile;
  if (!path_exists(index)) return {"model.safetensors"};
  const OrderedJson j = parse_json_strict(read_file(index), index);
  std::vector<std::string> names;
  for (const auto& item : j.at("weight_map").items()) names.push_back(item.value());
  std::sort(names.begin(), names.end());
  names.erase(std::unique(names.begin(), names.end()), names.end());
  return names;
}

// One source tensor's place in a new shard: copied, or replaced by the parts of its plan.
struct Planned {
  const TensorInfo* source = nullptr;
  const ProjectionPlan* plan = nullptr;  // null: copied byte for byte
};

std::string part_name(const std::string& tensor, const RowPart& r) {
  return fmt::format("{}@{}-{}.{}", tensor, r.row0, r.row1, weight_kind_name(r.kind));
}

std::vector<TensorSpec> specs_of(const std::vector<Planned>& planned) {
  std::vector<TensorSpec> specs;
  for (const Planned& p : planned) {
    const TensorInfo& t = *p.source;
    if (!p.plan) {
      specs.push_back({t.name, t.dtype, t.shape});
      continue;
    }
    const int64_t cols = p.plan->cols, blocks = blocks_of(cols);
    for (const RowPart& r : p.plan->parts) {
      const int64_t n = r.row1 - r.row0;
      const std::string name = part_name(t.name, r);
      if (r.kind == WeightKind::kExact) {
        specs.push_back({name, DType::kBF16, {n, cols}});
      } else if (r.kind == WeightKind::kQ8) {
        specs.push_back({name, DType::kI8, {n, blocks * kQuantBlock}});
        specs.push_back({name + ".scale", DType::kF32, {n, blocks}});
      } else {
        const StoredLayout l = stored_layout(r.kind, blocks);
        specs.push_back({name, DType::kU8, {n, blocks * l.block_bytes}});
        specs.push_back({name + ".scale", DType::kF16, {n, l.scales}});
      }
    }
  }
  return specs;
}

// Rows [r.row0, r.row1) of a BF16 matrix quantized by r.kind (gemm_int8.h's rules): the values
// are written as they are made, the scales after them.
void write_quantized(SafetensorsWriter& out, const uint8_t* bf16, int64_t cols, const RowPart& r,
                     const std::string& tensor, size_t threads) {
  const int64_t blocks = blocks_of(cols), n = r.row1 - r.row0;
  const bool q8 = r.kind == WeightKind::kQ8;
  const StoredLayout layout = stored_layout(r.kind, blocks);
  const int64_t row_bytes = blocks * layout.block_bytes;
  const int64_t scale_bytes = layout.scale_bytes, row_scales = layout.scales;
  std::vector<uint8_t> values(static_cast<size_t>(std::min(n, kRowsPerChunk) * row_bytes));
  std::vector<uint8_t> scales(static_cast<size_t>(n * row_scales * scale_bytes));
  for (int64_t c0 = 0; c0 < n; c0 += kRowsPerChunk) {
    const int64_t c1 = std::min(n, c0 + kRowsPerChunk);
    std::vector<int64_t> overflow(static_cast<size_t>(c1 - c0), -1);
    parallel_for(
        static_cast<size_t>(c1 - c0),
        [&](size_t i) {
          const int64_t row = c0 + static_cast<int64_t>(i);
          const uint8_t* src = bf16 + (r.row0 + row) * cols * 2;
          std::vector<float> v(static_cast<size_t>(cols));
          for (int64_t k = 0; k < cols; ++k) {
            uint16_t h;
            std::memcpy(&h, src + 2 * k, 2);  // the mapping may be unaligned
            v[static_cast<size_t>(k)] = bf16_to_f32(h);
          }
          uint8_t* q = values.data() + static_cast<int64_t>(i) * row_bytes;
          uint8_t* s = scales.data() + row * row_scales * scale_bytes;
          if (q8) {
            std::vector<float> sc(static_cast<size_t>(blocks));
            quantize_row_int8(v.data(), cols, reinterpret_cast<int8_t*>(q), sc.data());
            std::memcpy(s, sc.data(), sc.size() * 4);
          } else {
            std::vector<uint16_t> sc(static_cast<size_t>(row_scales));
            const bool fits =
                r.kind == WeightKind::kQ5    ? quantize_row_q5(v.data(), cols, q, sc.data())
                : r.kind == WeightKind::kQ4z ? quantize_row_q4z(v.data(), cols, q, sc.data())
                : r.kind == WeightKind::kQ5z ? quantize_row_q5z(v.data(), cols, q, sc.data())
                                             : quantize_row_q4(v.data(), cols, q, sc.data());
            if (!fits) overflow[i] = row;
            std::memcpy(s, sc.data(), sc.size() * 2);
          }
        },
        threads);
    const bool fitted = r.kind == WeightKind::kQ4z || r.kind == WeightKind::kQ5z;
    for (int64_t row : overflow)
      if (row >= 0 && fitted)
        fail(ErrorKind::kBadInput,
             "{}: row {} has a non-finite value or a super-block whose {} scale (range / 255) "
             "overflows F16; store it as q8 or bf16 (--q8 / --{})",
             tensor, r.row0 + row, weight_kind_name(r.kind), weight_kind_name(r.kind));
      else if (row >= 0)
        fail(ErrorKind::kBadInput,
             "{}: row {} has a block whose {} scale (|max| / {}) overflows F16; store it as q8 "
             "or bf16 (--q8 / --{})",
             tensor, r.row0 + row, weight_kind_name(r.kind), r.kind == WeightKind::kQ5 ? 16 : 8,
             weight_kind_name(r.kind));
    out.write(values.data(), static_cast<size_t>((c1 - c0) * row_bytes));
    check_interrupted();
  }
  out.write(scales.data(), scales.size());
}

// One shard of the quantized bundle; returns its SHA-256.
std::string write_shard(const SafetensorsFile& src, const std::vector<Planned>& planned,
                        const std::string& path, Progress& progress, size_t threads) {
  SafetensorsWriter out(path, specs_of(planned), src.metadata());
  for (const Planned& p : planned) {
    const TensorInfo& t = *p.source;
    const uint8_t* data = src.data(t);
    if (!p.plan) {
      for (uint64_t off = 0; off < t.nbytes; off += kCopyChunk) {
        const uint64_t n = std::min<uint64_t>(kCopyChunk, t.nbytes - off);
        out.write(data + off, n);
        // Released as it goes: a copied tensor (the embedding: 2.5 GB at Kev-27B) never becomes
        // resident whole.
        src.file().release_pages(static_cast<size_t>(data + off - src.file().data()), n);
        check_interrupted();
      }
    } else {
      for (const RowPart& r : p.plan->parts) {
        if (r.kind == WeightKind::kExact)
          out.write(data + r.row0 * p.plan->cols * 2,
                    static_cast<size_t>((r.row1 - r.row0) * p.plan->cols * 2));
        else
          write_quantized(out, data, p.plan->cols, r, t.name, threads);
      }
    }
    src.file().release_pages(static_cast<size_t>(data - src.file().data()), t.nbytes);
    progress.advance(t.nbytes, 1);
  }
  return out.finish();
}

// The small files, copied if they are still the bytes the manifest pins.
std::string copy_verified(const std::string& from, const std::string& to, const BundleManifest& m,
                          const std::string& name) {
  const std::string bytes = read_file(from + "/" + name);
  const std::string digest = sha256_hex(bytes);
  if (m.output_sha256(name) != digest)
    fail(ErrorKind::kIntegrity, "{}/{} changed after it was verified", from, name);
  write_file_synced(to, bytes);
  return digest;
}

}  // namespace

QuantDefaults quantize_defaults(const std::string& format, int64_t layers,
                                std::optional<int64_t> q8_layers,
                                std::optional<int64_t> q5_layers) {
  for (const auto& [flag, n] : {std::pair{"--q8-layers", q8_layers}, {"--q5-layers", q5_layers}}) {
    if (n && format != "q4" && format != "q4z")
      fail(ErrorKind::kBadInput, "{} chooses layers of the q4 format; --format {} has none", flag,
           format);
    if (n && (*n < 0 || *n > layers))
      fail(ErrorKind::kBadInput, "{} {}: the model has {} layers", flag, *n, layers);
  }
  if (format == "q8") return {int8_default_spec(layers), "", "", "", ""};
  if (format == "q4z") {
    QuantDefaults d = quantize_defaults("q4", layers, q8_layers, q5_layers);
    d.q4z = std::move(d.q4);
    d.q4.clear();
    d.q5z = std::move(d.q5);
    d.q5.clear();
    return d;
  }
  if (format == "q4") {
    // docs/notes/quantization-study.md: 4 bits where int8 quantizes, 8 bits for the rest (the
    // first quarter of the layers, or --q8-layers, and the GDN query and key rows after them);
    // with --q5-layers, that many layers after the 8-bit ones at 5 bits, and the GDN query and
    // key rows after those at 5 bits instead of 8.
    const int64_t first = q8_layers.value_or((layers + 3) / 4);
    const int64_t five = q5_layers.value_or(0), after = first + five;
    if (after > layers)
      fail(ErrorKind::kBadInput, "--q8-layers {} and --q5-layers {}: the model has {} layers",
           first, five, layers);
    QuantDefaults d;
    const auto add = [](std::string& spec, const std::string& part) {
      spec += (spec.empty() ? "" : ",") + part;
    };
    if (first > 0) add(d.q8, fmt::format("all@0-{}", first - 1));
    if (five > 0) add(d.q5, fmt::format("all@{}-{}", first, after - 1));
    if (after < layers)
      add(q5_layers ? d.q5 : d.q8,
          fmt::format("gdn_q@{}-{},gdn_k@{}-{}", after, layers - 1, after, layers - 1));
    d.q4 = after < layers ? late_layers_spec(after, layers) : "";
    if (d.q8 == fmt::format("all@0-{}", layers - 1)) d.q8 = "all";
    return d;
  }
  fail(ErrorKind::kBadInput, "unknown quantized format '{}' (expected q8, q4 or q4z)", format);
}

QuantizeSummary run_quantize(const QuantizeOptions& o) {
  const auto start = std::chrono::steady_clock::now();
  if (path_exists(o.out_dir))
    fail(ErrorKind::kBadInput, "{} already exists; choose a new output path or remove it first",
         o.out_dir);
  // The shards are hashed by verify_bundle and read again through their mappings: their
  // identity (device, inode, size, times) before the hashing must hold until publication, as
  // for kev export's base shards (docs/bundle-format.md, "What verified before parsed covers").
  std::map<std::string, FileIdentity> identities;
  for (const auto& entry : std::filesystem::directory_iterator(o.bundle)) {
    const std::string name = entry.path().filename().string();
    if (name.ends_with(".safetensors")) identities[name] = file_identity(entry.path().string());
  }
  auto check_unchanged = [&] {
    for (const auto& [name, id] : identities)
      if (file_identity(o.bundle + "/" + name) != id)
        fail(ErrorKind::kIntegrity, "{}/{} changed after it was verified", o.bundle, name);
  };
  verify_bundle(o.bundle);  // every output re-hashed before anything is parsed
  const BundleManifest manifest = read_bundle_manifest(o.bundle);
  if (manifest.doc.contains("quantized"))
    fail(ErrorKind::kBadInput, "{} is already a quantized bundle; quantize its BF16 source",
         o.bundle);
  const std::unique_ptr<ModelWeights> weights = ModelWeights::load(o.bundle);
  if (weights->quantized())
    fail(ErrorKind::kBadInput, "{} already stores projections quantized", o.bundle);
  const int64_t layers = weights->config().layers;
  if ((o.q8_layers || o.q5_layers) && (o.q8 || o.q4 || o.q5 || o.q4z || o.q5z))
    fail(ErrorKind::kBadInput,
         "{} sets the q4 format's default selection, which --q8 / --q4 / --q5 / --q4z / --q5z "
         "replace: give one or the other",
         o.q8_layers ? "--q8-layers" : "--q5-layers");
  const QuantDefaults d = quantize_defaults(o.format, layers, o.q8_layers, o.q5_layers);
  QuantizeSummary sum;
  sum.out_dir = o.out_dir;
  sum.q8 = o.q8.value_or(d.q8);
  // --q4 and --q4z both replace the format's 4-bit rows, whichever rule the format stores them
  // by; --q5 and --q5z its 5-bit ones.
  const bool four = o.q4 || o.q4z, five = o.q5 || o.q5z;
  sum.q4 = four ? o.q4.value_or("") : d.q4;
  sum.q4z = four ? o.q4z.value_or("") : d.q4z;
  sum.q5 = five ? o.q5.value_or("") : d.q5;
  sum.q5z = five ? o.q5z.value_or("") : d.q5z;
  QuantSpecs specs;
  specs.q8 = sum.q8;
  specs.q5 = sum.q5;
  specs.q4 = sum.q4;
  specs.q4z = sum.q4z;
  specs.q5z = sum.q5z;
  const std::vector<ProjectionPlan> plans = quantization_plan(weights->config(), specs);
  std::map<std::string, const ProjectionPlan*> by_tensor;
  for (const ProjectionPlan& p : plans)
    if (p.reduced()) by_tensor[weights->prefix() + p.name] = &p;

  if (by_tensor.empty() || std::none_of(plans.begin(), plans.end(), [](const ProjectionPlan& p) {
        return std::any_of(p.parts.begin(), p.parts.end(),
                           [](const RowPart& r) { return r.kind != WeightKind::kExact; });
      }))
    fail(ErrorKind::kBadInput,
         "--q8 '{}', --q5 '{}', --q4 '{}', --q4z '{}' and --q5z '{}' reduce no projection of "
         "{}; nothing to do",
         sum.q8.empty() ? "none" : sum.q8, sum.q5.empty() ? "none" : sum.q5,
         sum.q4.empty() ? "none" : sum.q4, sum.q4z.empty() ? "none" : sum.q4z,
         sum.q5z.empty() ? "none" : sum.q5z, o.bundle);
  StagingDir staging(o.out_dir);
  std::map<std::string, std::string> outputs;
  nlohmann::ordered_json weight_map = nlohmann::ordered_json::object();
  uint64_t total_size = 0;
  std::vector<std::unique_ptr<SafetensorsFile>> shards;
  std::vector<std::vector<Planned>> planned;
  uint64_t total_bytes = 0, tensors = 0;
  for (const std::string& name : shard_names(o.bundle)) {
    shards.push_back(std::make_unique<SafetensorsFile>(o.bundle + "/" + name));
    std::vector<Planned> p;
    for (const TensorInfo& t : shards.back()->tensors()) {
      auto it = by_tensor.find(t.name);
      p.push_back({&t, it == by_tensor.end() ? nullptr : it->second});
      total_bytes += t.nbytes;
      ++tensors;
    }
    planned.push_back(std::move(p));
  }
  check_unchanged();
  {
    Progress progress("quantize", total_bytes, tensors);
    const std::vector<std::string> names = shard_names(o.bundle);
    for (size_t s = 0; s < shards.size(); ++s) {
      outputs[names[s]] =
          write_shard(*shards[s], planned[s], staging.file(names[s]), progress, o.threads);
      for (const TensorSpec& spec : specs_of(planned[s])) {
        weight_map[spec.name] = names[s];
        total_size += spec.nbytes();
      }
      for (const Planned& p : planned[s])
        if (p.plan) {
          ++sum.projections;
          sum.parts += p.plan->parts.size();
        }
    }
  }
  check_interrupted();
  if (path_exists(o.bundle + "/" + kIndexFile)) {
    nlohmann::ordered_json index = {{"metadata", {{"total_size", total_size}}},
                                    {"weight_map", weight_map}};
    const std::string bytes = index.dump(2) + "\n";
    write_file_synced(staging.file(kIndexFile), bytes);
    outputs[kIndexFile] = sha256_hex(bytes);
  }
  for (const char* name : kCopiedBaseFiles)
    outputs[name] = copy_verified(o.bundle, staging.file(name), manifest, name);
  outputs[kHeadFile] = copy_verified(o.bundle, staging.file(kHeadFile), manifest, kHeadFile);

  OrderedJson doc = manifest.doc;
  OrderedJson source_outputs = doc["outputs"];
  doc["outputs"] = OrderedJson::object();
  for (const auto& [k, v] : outputs) doc["outputs"][k] = v;
  doc["quantized"] = {{"rule", kQuantRule},
                      {"q8", sum.q8},
                      {"q4", sum.q4},
                      {"source",
                       {{"manifest_sha256", sha256_hex(read_file(o.bundle + "/" + kManifestFile))},
                        {"outputs", source_outputs}}}};
  // Recorded only where given, so that the manifests of q8 / q4 bundles stay what they were.
  if (!sum.q5.empty()) doc["quantized"]["q5"] = sum.q5;
  if (!sum.q4z.empty()) doc["quantized"]["q4z"] = sum.q4z;
  if (!sum.q5z.empty()) doc["quantized"]["q5z"] = sum.q5z;
  write_file_synced(staging.file(kManifestFile), doc.dump(2) + "\n");
  check_interrupted();
  check_unchanged();
  staging.publish();
  for (const auto& s : shards) sum.input_bytes += s->file().size();
  for (const auto& entry : std::filesystem::directory_iterator(o.out_dir))
    sum.output_bytes += entry.file_size();
  sum.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return sum;
}

}  // namespace kev
