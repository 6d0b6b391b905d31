// `kev synth`: writes a synthetic checkpoint in the released layout (see kev/synth/synth.h).
#include <cstdio>
#include <memory>
#include <nlohmann/json.hpp>

#include "cli/command.h"
#include "cli/options.h"
#include "kev/synth/synth.h"

namespace {

struct Options {
  std::string out, shape = "tiny", tokenizer, form = "lora";
  uint64_t seed = 0;
  double temperature = 2.406050072164233;
  // -1: keep the shape's value.
  int64_t hidden = -1, intermediate = -1, layers = -1, heads = -1, kv_heads = -1, head_dim = -1;
  int64_t linear_key_heads = -1, linear_value_heads = -1, linear_key_dim = -1,
          linear_value_dim = -1;
  int64_t vocab = -1, pointer = -1, rank = -1, alpha = -1;
};

int run_synth(const Options& o) {
  kev::SynthOptions s;
  s.out = o.out;
  s.shape = kev::synth_shape(o.shape);
  s.seed = o.seed;
  s.tokenizer = o.tokenizer;
  s.temperature = o.temperature;
  s.form = o.form;
  auto set = [](int64_t v, int64_t& field) {
    if (v != -1) field = v;
  };
  set(o.hidden, s.shape.hidden);
  set(o.intermediate, s.shape.intermediate);
  set(o.layers, s.shape.layers);
  set(o.heads, s.shape.heads);
  set(o.kv_heads, s.shape.kv_heads);
  set(o.head_dim, s.shape.head_dim);
  set(o.linear_key_heads, s.shape.linear_key_heads);
  set(o.linear_value_heads, s.shape.linear_value_heads);
  set(o.linear_key_dim, s.shape.linear_key_dim);
  set(o.linear_value_dim, s.shape.linear_value_dim);
  set(o.vocab, s.shape.vocab);
  set(o.pointer, s.shape.pointer);
  set(o.rank, s.shape.rank);
  set(o.alpha, s.shape.alpha);
  if (o.vocab == 0) s.shape.vocab = -1;  // 0 is not "automatic" on the command line
  kev::SynthSummary r = kev::synthesize(s);
  nlohmann::ordered_json j = {{"out", o.out},
                              {"shape", o.shape},
                              {"vocab", r.vocab},
                              {"base_tensors", r.base_tensors},
                              {"base_bytes", r.base_bytes},
                              {"adapter_tensors", r.adapter_tensors},
                              {"form", o.form}};
  std::printf("%s\n", j.dump().c_str());
  return 0;
}

const bool synth_registered = kev::cli::register_command(
    "synth", "write a synthetic Kev checkpoint (base + adapter + head.pt) in the released layout",
    [](CLI::App& app) {
      auto o = std::make_shared<Options>();
      app.add_option("--out", o->out, "output directory (must not exist)")->required();
      app.add_option("--shape", o->shape,
                     "tiny (default; Kev-4B/9B depth), tiny-0.8b, tiny-27b (tiny widths at those "
                     "members' depths), 0.8b or 4b (full dimensions)")
          ->capture_default_str();
      app.add_option("--seed", o->seed, "seed of all values")->capture_default_str();
      app.add_option("--form", o->form,
                     "lora (base + adapter, default) or full (a full-weight checkpoint in "
                     "DIR/checkpoint: Kev 1.0's Kev-27B layout)")
          ->check(kev::cli::one_of({"lora", "full"}))
          ->capture_default_str();
      app.add_option("--tokenizer", o->tokenizer,
                     "tokenizer.json to copy (default: a built-in byte-level BPE)");
      app.add_option("--temperature", o->temperature, "calibration temperature in head.pt")
          ->check(kev::cli::number(0, kev::cli::Bound::kOpen, kev::cli::kMaxTemperature,
                                   kev::cli::Bound::kClosed))
          ->capture_default_str();
      app.add_option("--hidden", o->hidden, "hidden size");
      app.add_option("--intermediate", o->intermediate, "MLP intermediate size");
      app.add_option("--layers", o->layers, "number of layers");
      app.add_option("--heads", o->heads, "attention heads");
      app.add_option("--kv-heads", o->kv_heads, "attention KV heads");
      app.add_option("--head-dim", o->head_dim, "attention head dimension");
      app.add_option("--linear-key-heads", o->linear_key_heads, "GDN key heads");
      app.add_option("--linear-value-heads", o->linear_value_heads, "GDN value heads");
      app.add_option("--linear-key-dim", o->linear_key_dim, "GDN key head dimension");
      app.add_option("--linear-value-dim", o->linear_value_dim, "GDN value head dimension");
      app.add_option("--vocab", o->vocab,
                     "vocabulary size (default: shape's, tiny: tokenizer size rounded to 64)");
      app.add_option("--pointer", o->pointer, "pointer-head dimension");
      app.add_option("--rank", o->rank, "LoRA rank (16)");
      app.add_option("--alpha", o->alpha, "LoRA alpha (32)");
      return [o] { return run_synth(*o); };
    });

}  // namespace
