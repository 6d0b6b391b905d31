// kev pin [--base DIR] --checkpoint DIR --out recipe.json [--model M]
//         (--base for LoRA checkpoints; a full-weight one, kev-27b, has none; without --model
//         the member is told from the checkpoint, or pin refuses and asks for it: pin.h)
//         [--base-revision REV] [--checkpoint-revision REV]
#include <cstdio>
#include <memory>

#include "cli/command.h"
#include "kev/export/pin.h"

namespace {

const bool pin_registered = kev::cli::register_command(
    "pin", "write a pinned recipe from a trusted local download", [](CLI::App& app) {
      auto o = std::make_shared<kev::PinOptions>();
      app.add_option("--base", o->base_dir,
                     "base model directory (LoRA checkpoints; a full-weight one has none)");
      app.add_option("--checkpoint", o->checkpoint_dir, "Kev checkpoint directory")->required();
      app.add_option("--out", o->out_path, "recipe file to create")->required();
      app.add_option("--model", o->model,
                     "family member: kev-0.8b, kev-4b, kev-9b, kev-27b (Kev 1.0: full weights) or "
                     "kev-27b-v1-lora (default: the member the checkpoint is, told from its form "
                     "and the config.json of its backbone, the base's for an adapter; needed "
                     "where that is no member or several, e.g. kev synth's tiny shapes)");
      app.add_option("--base-revision", o->base_revision,
                     "base commit (40 hex) to record where the recipe's is null and --base is "
                     "not a Hugging Face cache snapshot");
      app.add_option("--checkpoint-revision", o->checkpoint_revision,
                     "checkpoint commit (40 hex), likewise");
      return [o] {
        kev::PinSummary s = kev::run_pin(*o);
        if (!s.member.empty()) std::fprintf(stderr, "kev pin: %s\n", s.member.c_str());
        for (const auto& note : s.notes) std::fprintf(stderr, "kev pin: note: %s\n", note.c_str());
        std::printf(
            "pinned %zu files into %s (%zu cross-checked against Hugging Face cache "
            "blob names)\n",
            s.files, o->out_path.c_str(), s.cross_checked);
        return 0;
      };
    });

}  // namespace
