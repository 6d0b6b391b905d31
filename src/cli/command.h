// The `kev` command registry. Each subcommand lives in src/cli/cmd_<name>.cpp and registers
// itself at static-initialisation time:
//
//   static const bool registered = kev::cli::register_command(
//       "head", "pointer-head logits and probabilities", [](CLI::App& app) {
//         auto opts = std::make_shared<Options>();
//         app.add_option("--bundle", opts->bundle, "export bundle")->required();
//         return [opts] { return run_head(*opts); };   // returns the process exit code
//       });
//
// main() adds --quiet, parses, runs the chosen command and maps kev::Error to an exit code
// with one line "kev <command>: <message>" on stderr.
#pragma once
#include <CLI/CLI.hpp>

#include <functional>
#include <string>
#include <vector>

namespace kev::cli {

using Runner = std::function<int()>;
using Setup = std::function<Runner(CLI::App&)>;

struct CommandEntry {
  std::string name;
  std::string summary;
  Setup setup;
};

bool register_command(std::string name, std::string summary, Setup setup);
std::vector<CommandEntry>& commands();

}  // namespace kev::cli
