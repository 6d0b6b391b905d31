// `kev quantize`: a bundle whose big projections are stored at 8, 5.5 or 5.56, 4.5 or 4.56 bits per
// weight, made from a BF16 bundle (docs/bundle-format.md "Quantized bundles").
//
// Contract: run_quantize verifies the source bundle (every output re-hashed, verify_bundle)
// before it parses anything, refuses a source that is itself quantized or that this kev does
// not run, and publishes `out` atomically (core/file.h StagingDir: nothing partial is ever left,
// an existing `out` is refused). The shards keep their names and tensor order; a projection the
// plan (model/quant_plan.h) reduces is replaced, in place, by its row parts; every other tensor,
// the head, config and tokenizer files are copied byte for byte. Quantization is integer and
// IEEE-exact code (gemm_int8.h's rules) with no CPU-dependent step, so the bytes, and the
// manifest's digests, are the same on every CPU and architecture. It streams: one tensor at a
// time, the source pages released after use, so memory stays flat whatever the model's size.
// Errors: kBadInput (a bad spec, an existing out, a weight whose F16 scale would overflow,
// naming the tensor), kIntegrity (the source does not match its manifest), kUnsupported, kIo.
#pragma once
#include <cstdint>
#include <optional>
#include <string>

namespace kev {

struct QuantizeOptions {
  std::string bundle, out_dir;
  std::string format = "q4z";         // "q8", "q4" or "q4z": the defaults below
  std::optional<std::string> q8, q4;  // quant_plan.h specs replacing the format's defaults
  std::optional<std::string> q5;      // rows at 5 bits (no format has any by default)
  std::optional<std::string> q4z;     // rows as q4z (format q4z's 4-bit rows)
  std::optional<std::string> q5z;     // rows as q5z (format q4z's 5-bit rows)
  // q8 replaces the format's 8-bit rows, q5 or q5z (either or both) its 5-bit ones, q4 or q4z
  // (either or both) its 4-bit ones.
  // q4 / q4z only, without the specs: the first this many layers at 8 bits instead of a quarter,
  // and that many after them at 5 bits (the GDN query and key rows after those at 5 bits too).
  std::optional<int64_t> q8_layers, q5_layers;
  size_t threads = 0;
};

// The default specs of a format for a model of `layers` layers (docs/bundle-format.md says how
// they were chosen); for q4, `q8_layers` (0..layers) replaces the quarter of the layers kept at
// 8 bits, and `q5_layers` puts that many layers after them, and the GDN query and key rows after
// those, at 5 bits (q8_layers + q5_layers <= layers). Refused (kBadInput) for format q8. q4z is
// q4's selection with its 4-bit rows stored by the q4z rule and its 5-bit ones by the q5z rule.
struct QuantDefaults {
  std::string q8, q4, q5, q4z, q5z;
};
QuantDefaults quantize_defaults(const std::string& format, int64_t layers,
                                std::optional<int64_t> q8_layers = std::nullopt,
                                std::optional<int64_t> q5_layers = std::nullopt);

struct QuantizeSummary {
  std::string out_dir, q8, q4, q5, q4z, q5z;
  uint64_t projections = 0, parts = 0, input_bytes = 0, output_bytes = 0;
  double seconds = 0;
};

QuantizeSummary run_quantize(const QuantizeOptions& o);

inline constexpr const char* kQuantRule = "kev-quant-b32/1";

}  // namespace kev
