// Entry point of the `kev` binary: dispatches to the registered subcommands.
#include <algorithm>
#include <cstdio>
#include <exception>
#include <map>

#include "cli/command.h"
#include "cli/options.h"
#include "kev/core/error.h"
#include "kev/core/file.h"
#include "kev/core/interrupt.h"
#include "kev/core/progress.h"
#include "kev/core/threads.h"
#include "kev/cpu/isa.h"
#include "kev/cpu/model_kernels.h"

namespace kev::cli {

std::vector<CommandEntry>& commands() {
  static std::vector<CommandEntry> registry;
  return registry;
}

bool register_command(std::string name, std::string summary, Setup setup) {
  commands().push_back({std::move(name), std::move(summary), std::move(setup)});
  return true;
}

}  // namespace kev::cli

int main(int argc, char** argv) {
  using namespace kev;
  CLI::App app{"kev: native Kev decision models (export, verify, score)", "kev"};
  app.set_version_flag("--version", std::string("kev ") + KEV_VERSION);
  bool quiet = false;
  app.add_flag("--quiet,-q", quiet, "no progress output on stderr");
  app.require_subcommand(1);
  std::map<CLI::App*, cli::Runner> runners;
  auto& entries = cli::commands();
  std::sort(entries.begin(), entries.end(),
            [](const auto& a, const auto& b) { return a.name < b.name; });
  for (auto& entry : entries) {
    CLI::App* sub = app.add_subcommand(entry.name, entry.summary);
    sub->add_flag("--quiet,-q", quiet, "no progress output on stderr");
    runners[sub] = entry.setup(*sub);
  }
  cli::check_every_option(app);  // an option registered without a check still gets one
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return cli::refuse_parse_error(app, e);  // one sentence, exit 2 (0 for --help, --version)
  }
  Progress::set_quiet(quiet);
  install_interrupt_handlers();
  WriteFaults::configure_from_env();
  for (auto& [sub, run] : runners) {
    if (!sub->parsed()) continue;
    try {
      check_isa_environment();
      check_kernel_environment();
      check_threads_environment();
      return run();
    } catch (const Error& e) {
      std::fprintf(stderr, "kev %s: %s\n", sub->get_name().c_str(), e.what());
      return exit_code(e.kind());
    } catch (const std::bad_alloc&) {
      std::fprintf(stderr, "kev %s: out of memory\n", sub->get_name().c_str());
      return exit_code(ErrorKind::kOverload);
    } catch (const std::exception& e) {
      std::fprintf(stderr, "kev %s: internal error: %s\n", sub->get_name().c_str(), e.what());
      return exit_code(ErrorKind::kInternal);
    }
  }
  return 2;
}
