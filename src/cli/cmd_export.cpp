// kev export --recipe R [--base DIR] --checkpoint DIR --out DIR (--base for LoRA checkpoints)
#include <nlohmann/json.hpp>

#include <cstdio>
#include <memory>

#include "cli/command.h"
#include "kev/export/exporter.h"

namespace {

struct Options {
  kev::ExportOptions export_options;
  bool json = false;
};

int run(const Options& o) {
  kev::ExportSummary s = kev::run_export(o.export_options);
  if (o.json) {
    nlohmann::json j = {{"out", s.out_dir},
                        {"model", s.model},
                        {"merged_targets", s.merged_targets},
                        {"tensors", s.tensors},
                        {"shards", s.shards},
                        {"input_bytes", s.input_bytes},
                        {"output_bytes", s.output_bytes},
                        {"seconds", s.seconds},
                        {"merge_isa", s.merge_isa}};
    std::printf("%s\n", j.dump().c_str());
  } else {
    if (s.merge_isa == "none") {
      std::printf(
          "exported %s to %s: full weights copied unchanged, %zu tensors in %zu shards, %.2f GB "
          "written in %.1f s\n",
          s.model.c_str(), s.out_dir.c_str(), s.tensors, s.shards, double(s.output_bytes) / 1e9,
          s.seconds);
    } else {
      std::printf(
          "exported %s to %s: %zu merged LoRA targets, %zu tensors in %zu shards, %.2f GB "
          "written in %.1f s (merge kernel %s)\n",
          s.model.c_str(), s.out_dir.c_str(), s.merged_targets, s.tensors, s.shards,
          double(s.output_bytes) / 1e9, s.seconds, s.merge_isa.c_str());
    }
  }
  return 0;
}

const bool export_registered = kev::cli::register_command(
    "export",
    "verify pinned inputs, merge the LoRA adapter (or copy full weights), publish a native bundle",
    [](CLI::App& app) {
      auto o = std::make_shared<Options>();
      app.add_option("--recipe", o->export_options.recipe_path,
                     "pinned recipe (recipes/kev-4b.json)")
          ->required();
      app.add_option("--base", o->export_options.base_dir,
                     "base model directory (LoRA checkpoints; a full-weight one has none)");
      app.add_option("--checkpoint", o->export_options.checkpoint_dir,
                     "Kev checkpoint directory (adapter + head.pt, or full weights + head.pt)")
          ->required();
      app.add_option("--out", o->export_options.out_dir, "new bundle directory (must not exist)")
          ->required();
      app.add_flag("--json", o->json, "print the summary as JSON");
      return [o] { return run(*o); };
    });

}  // namespace
