// `kev forward`: final-normed backbone hidden states for token rows.
//
// Input JSON: {"prefix": [ids] (optional), "rows": [{"ids": [...], "positions": [...]}]}.
// Output safetensors (written to a temporary file beside OUT, then renamed into place):
// `row.<i>` F32 [len, hidden] per row, plus `prefix` F32 [len, hidden] with --with-prefix.
// Without --with-prefix the prefix is prefilled as a state is (its rows' outputs are not
// computed); the rows' outputs are the same bits either way.
#include <nlohmann/json.hpp>

#include <unistd.h>
#include <chrono>
#include <cstdio>
#include <filesystem>

#include "cli/command.h"
#include "cli/options.h"
#include "cli/scorer_flags.h"
#include "kev/core/error.h"
#include "kev/core/file.h"
#include "kev/core/json_strict.h"
#include "kev/formats/safetensors.h"
#include "kev/model/model.h"

namespace kev::cli {
namespace {

struct Options {
  std::string bundle, input, output, gdn = "recurrent";
  bool with_prefix = false;
  size_t threads = 0;
  Precision precision = Precision::kFp32;
};

std::vector<int64_t> int_list(const nlohmann::json& j, const std::string& what) {
  if (!j.is_array()) fail(ErrorKind::kBadInput, "input: {} must be an array of integers", what);
  std::vector<int64_t> out;
  for (const auto& v : j) {
    if (!v.is_number_integer())
      fail(ErrorKind::kBadInput, "input: {} must contain only integers", what);
    out.push_back(v.get<int64_t>());
  }
  return out;
}

std::vector<int32_t> id_list(const nlohmann::json& j, const std::string& what) {
  std::vector<int32_t> out;
  for (int64_t v : int_list(j, what)) {
    if (v < 0 || v > INT32_MAX)
      fail(ErrorKind::kBadInput, "input: {} has id {} out of range", what, v);
    out.push_back(static_cast<int32_t>(v));
  }
  return out;
}

int run_forward(const Options& o) {
  // The strict reader: where and why a file is not JSON, in printable ASCII; duplicate keys
  // refused.
  const nlohmann::json in = parse_json_strict(read_file(o.input), o.input);
  if (!in.is_object() || !in.contains("rows") || !in["rows"].is_array())
    fail(ErrorKind::kBadInput, "{}: expected an object with an array 'rows'", o.input);
  std::vector<int32_t> prefix;
  if (in.contains("prefix")) prefix = id_list(in["prefix"], "prefix");
  std::vector<RowRequest> rows;
  for (size_t i = 0; i < in["rows"].size(); ++i) {
    const auto& r = in["rows"][i];
    std::string what = "rows[" + std::to_string(i) + "]";
    if (!r.is_object() || !r.contains("ids"))
      fail(ErrorKind::kBadInput, "input: {} must be an object with 'ids'", what);
    RowRequest req;
    req.ids = id_list(r["ids"], what + ".ids");
    if (r.contains("positions")) req.positions = int_list(r["positions"], what + ".positions");
    rows.push_back(std::move(req));
  }
  ForwardOptions fo;
  fo.threads = o.threads;
  fo.gdn = o.gdn == "chunked" ? GdnMode::kChunked : GdnMode::kRecurrent;
  fo.precision = o.precision;
  auto model = Model::load(o.bundle, fo);
  const int64_t h = model->config().hidden;
  PrefixState state = model->empty_state();
  std::vector<float> prefix_hidden;
  if (!prefix.empty())
    state = model->extend(state, prefix, {}, o.with_prefix ? &prefix_hidden : nullptr);
  std::vector<RowResult> results = model->run_rows(state, rows);

  std::vector<TensorSpec> specs;
  std::vector<const std::vector<float>*> blobs;
  if (o.with_prefix && !prefix.empty()) {
    specs.push_back({"prefix", DType::kF32, {static_cast<int64_t>(prefix.size()), h}});
    blobs.push_back(&prefix_hidden);
  }
  for (size_t i = 0; i < results.size(); ++i) {
    specs.push_back({"row." + std::to_string(i), DType::kF32, {results[i].rows, h}});
    blobs.push_back(&results[i].hidden);
  }
  // Atomic publication: a reader never sees a partial OUT.
  std::string tmp = o.output + ".kev-tmp." + std::to_string(::getpid());
  try {
    SafetensorsWriter writer(tmp, specs);
    for (const auto* b : blobs) writer.write(b->data(), b->size() * sizeof(float));
    writer.finish();
    std::error_code ec;
    std::filesystem::rename(tmp, o.output, ec);
    if (ec) fail(ErrorKind::kIo, "{}: cannot rename into place ({})", o.output, ec.message());
  } catch (...) {
    std::error_code ec;
    std::filesystem::remove(tmp, ec);
    throw;
  }
  return 0;
}

const bool forward_registered =
    register_command("forward", "backbone hidden states for token rows", [](CLI::App& app) {
      auto o = std::make_shared<Options>();
      app.add_option("--bundle", o->bundle, "model directory (export bundle or base checkpoint)")
          ->check(path())
          ->required();
      app.add_option("--input", o->input, "JSON {prefix?, rows: [{ids, positions?}]}")
          ->check(path())
          ->required();
      app.add_option("--output", o->output, "output safetensors (row.<i> F32 [len, hidden])")
          ->check(path())
          ->required();
      app.add_flag("--with-prefix", o->with_prefix, "also write `prefix` hidden states");
      app.add_option("--gdn", o->gdn, "GDN form: recurrent (exact, default) or chunked")
          ->check(one_of({"recurrent", "chunked"}));
      app.add_option("--threads", o->threads, "worker threads (default: all cores)")
          ->check(whole(0, kMaxThreads));
      add_precision_flag(app, o->precision);
      return [o] { return run_forward(*o); };
    });

}  // namespace
}  // namespace kev::cli
