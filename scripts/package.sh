#!/usr/bin/env bash
# Builds the Debian packages with CPack, split as Debian splits them (cmake/package.cmake), in
# build/package:
#   kev-native_<version>-1_<arch>.deb          the command and server, man pages, bash completion,
#                                              docs, recipes, examples, the systemd unit; no Python
#   python3-kev-native_<version>-1_<arch>.deb  the Python module kev_native (when pybind11 is
#                                              found); depends on kev-native of the same version
#   kev-native-dev_<version>-1_<arch>.deb      headers, static libraries, find_package(kev)
#
#   scripts/package.sh [BUILD_DIR]      (default build/package; uses ccache when installed)
#
# The tree is configured for the system prefix (/usr, /etc/default/kev, the Python module in
# /usr/lib/python3/dist-packages); dependencies come from dpkg-shlibdeps (docs/install.md). It
# prints the paths of the packages it made, one a line.
set -euo pipefail
cd "$(dirname "$0")/.."
dir=${1:-build/package}
launcher=()
if command -v ccache >/dev/null; then
  export CCACHE_BASEDIR=${CCACHE_BASEDIR:-$PWD}
  launcher=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache -DCMAKE_C_COMPILER_LAUNCHER=ccache)
fi
cmake -S . -B "$dir" -G Ninja -DCMAKE_BUILD_TYPE=Release -DKEV_WERROR=ON -DKEV_TESTS=OFF \
  -DKEV_BENCH=OFF -DCMAKE_INSTALL_PREFIX=/usr -DKEV_SYSTEMD_UNIT=ON "${launcher[@]}" >/dev/null
cmake --build "$dir" -j"${KEV_JOBS:-$(nproc)}"
rm -f "$dir"/*.deb
(cd "$dir" && cpack -G DEB >/dev/null)
ls "$dir"/*.deb
