// kev verify DIR: re-hash a bundle against its manifest.
#include <cstdio>
#include <memory>
#include <string>

#include "cli/command.h"
#include "cli/options.h"
#include "kev/export/bundle.h"

namespace {

const bool verify_registered = kev::cli::register_command(
    "verify", "re-hash an export bundle against its manifest", [](CLI::App& app) {
      auto dir = std::make_shared<std::string>();
      app.add_option("dir", *dir, "bundle directory")->check(kev::cli::path())->required();
      return [dir] {
        size_t n = kev::verify_bundle(*dir);
        std::printf("%s: OK (%zu files match kev_export.json)\n", dir->c_str(), n);
        return 0;
      };
    });

}  // namespace
