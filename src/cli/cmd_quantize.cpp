// kev quantize --bundle DIR --out DIR [--format q4z|q4|q8] [--q8-layers N] [--q5-layers N]
//   [--q8 SPEC --q4 SPEC [--q5 SPEC] [--q4z SPEC] [--q5z SPEC]]
#include <nlohmann/json.hpp>

#include <cstdio>
#include <memory>

#include "cli/command.h"
#include "cli/options.h"
#include "kev/core/threads.h"
#include "kev/export/quantize.h"

namespace {

struct QuantizeFlags {
  kev::QuantizeOptions q;
  std::string q8, q4, q5, q4z, q5z;
  int64_t q8_layers = -1, q5_layers = -1;  // not given
  bool json = false;
};

int run_quantize_command(QuantizeFlags& o) {
  if (!o.q8.empty()) o.q.q8 = o.q8;
  if (!o.q4.empty()) o.q.q4 = o.q4;
  if (!o.q5.empty()) o.q.q5 = o.q5;
  if (!o.q4z.empty()) o.q.q4z = o.q4z;
  if (!o.q5z.empty()) o.q.q5z = o.q5z;
  if (o.q8_layers >= 0) o.q.q8_layers = o.q8_layers;
  if (o.q5_layers >= 0) o.q.q5_layers = o.q5_layers;
  const kev::QuantizeSummary s = kev::run_quantize(o.q);
  if (o.json) {
    nlohmann::json j = {{"out", s.out_dir},
                        {"q8", s.q8},
                        {"q4", s.q4},
                        {"q5", s.q5},
                        {"q4z", s.q4z},
                        {"q5z", s.q5z},
                        {"projections", s.projections},
                        {"parts", s.parts},
                        {"input_bytes", s.input_bytes},
                        {"output_bytes", s.output_bytes},
                        {"seconds", s.seconds}};
    std::printf("%s\n", j.dump().c_str());
  } else {
    std::printf(
        "quantized %s to %s: %llu projections in %llu parts, %.3f GB -> %.3f GB in %.1f s\n"
        "  q8: %s\n  q5: %s\n  q4: %s\n  q4z: %s\n  q5z: %s\n",
        o.q.bundle.c_str(), s.out_dir.c_str(), static_cast<unsigned long long>(s.projections),
        static_cast<unsigned long long>(s.parts), double(s.input_bytes) / 1e9,
        double(s.output_bytes) / 1e9, s.seconds, s.q8.empty() ? "none" : s.q8.c_str(),
        s.q5.empty() ? "none" : s.q5.c_str(), s.q4.empty() ? "none" : s.q4.c_str(),
        s.q4z.empty() ? "none" : s.q4z.c_str(), s.q5z.empty() ? "none" : s.q5z.c_str());
  }
  return 0;
}

const bool quantize_registered = kev::cli::register_command(
    "quantize", "store a BF16 bundle's projections at 8, 5 or 4 bits (a new, verified bundle)",
    [](CLI::App& app) {
      auto o = std::make_shared<QuantizeFlags>();
      app.add_option("--bundle", o->q.bundle, "BF16 bundle to quantize")
          ->check(kev::cli::path())
          ->required();
      app.add_option("--out", o->q.out_dir, "new bundle directory (must not exist)")
          ->check(kev::cli::path())
          ->required();
      app.add_option("--format", o->q.format,
                     "q4z (about 4.5 bits per weight with a fitted step and zero per block, 8 bits "
                     "where sensitive, 5-bit rows as q5z), q4 (the same selection by the earlier "
                     "symmetric rules) or q8")
          ->check(kev::cli::one_of({"q4z", "q4", "q8"}))
          ->default_str("q4z");
      app.add_option("--q8", o->q8,
                     "projection rows stored at 8 bits, as class[@first-last],... (layers as plain "
                     "decimals) or none (default: the format's)");
      app.add_option("--q4", o->q4,
                     "projection rows stored at 4 bits by q4's rule (same syntax; it and --q4z "
                     "replace the format's 4-bit rows)");
      app.add_option("--q5", o->q5,
                     "projection rows stored at 5 bits by q5's rule (same syntax; it and --q5z "
                     "replace the format's 5-bit rows; default none)");
      app.add_option("--q4z", o->q4z,
                     "projection rows stored as q4z, 4 bits with a fitted step and zero (same "
                     "syntax)");
      app.add_option("--q5z", o->q5z,
                     "projection rows stored as q5z, 5 bits with a fitted step and zero (same "
                     "syntax)");
      app.add_option(
             "--q8-layers", o->q8_layers,
             "q4 / q4z only: the first N layers at 8 bits (default: a quarter of the layers, "
             "rounded up; the GDN query and key rows are at 8 bits in every layer)")
          ->check(kev::cli::whole(0, 4096));
      app.add_option(
             "--q5-layers", o->q5_layers,
             "q4 / q4z only: N layers after the 8-bit ones at 5 bits (q5, or q5z for q4z), and "
             "the GDN query and key rows after those at 5 bits instead of 8 (default: none)")
          ->check(kev::cli::whole(0, 4096));
      app.add_option("--threads", o->q.threads, "worker threads (default: all cores)")
          ->check(kev::cli::whole(1, kev::kMaxThreads));
      app.add_flag("--json", o->json, "print the summary as JSON");
      return [o] { return run_quantize_command(*o); };
    });

}  // namespace
