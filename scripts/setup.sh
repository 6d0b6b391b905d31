#!/usr/bin/env bash
# Installs everything kev-native needs on Debian 12 (as root): build tools, libraries, the
# torch/numpy/SciPy oracles, HAProxy (scale-out tests), the Prometheus exposition parser (/metrics
# tests), and the npm packages of the tokenizer oracle, of the Kubernetes manifest validator and
# of the OpenAPI validator (from their lock files).
# Idempotent: packages already present are not reinstalled.
set -euo pipefail
cd "$(dirname "$0")/.."

PACKAGES=(
  build-essential cmake ninja-build pkg-config git clang-14 clang-format
  ccache  # the compiler cache CMake uses when present (CMakeLists.txt, KEV_CCACHE)
  libfuzzer-14-dev libclang-rt-14-dev
  nlohmann-json3-dev libssl-dev libzip-dev libcli11-dev libfmt-dev libpcre2-dev
  libutf8proc-dev libopenblas-dev libboost-dev libgtest-dev libgmock-dev libbenchmark-dev
  libmicrohttpd-dev libcpp-httplib-dev  # only for bench/http_layers (the HTTP-layer comparison)
  # the Python module kev_native (python/) and the Debian package's checks (scripts/package.sh,
  # scripts/test_package.sh: dpkg-shlibdeps, mmdebstrap; curl)
  python3-dev pybind11-dev python3-pybind11 python3-setuptools python3-venv dpkg-dev mmdebstrap curl
  python3 python3-torch python3-numpy python3-scipy python3-pytest python3-prometheus-client nodejs npm haproxy
  python3-tqdm time  # only for bench/llama_peer.py (llama.cpp's GGUF converter; peak RSS)
  # ARM64 under emulation (scripts/test_aarch64.sh): the cross compiler, qemu-user and the arm64
  # builds of the libraries kev links (multiarch; header-only ones are shared with the host)
  g++-aarch64-linux-gnu qemu-user-static file
  libssl-dev:arm64 libzip-dev:arm64 libfmt-dev:arm64 libpcre2-dev:arm64 libutf8proc-dev:arm64
  libboost-dev:arm64 libgtest-dev:arm64 libgmock-dev:arm64
  # the arm64 C library qemu runs the binaries with (-L /): the cross toolchain's own copy in
  # /usr/aarch64-linux-gnu (libc6-arm64-cross 2.36-8cross1) hangs in pthread_create under
  # qemu-aarch64 7.2; the multiarch libc6:arm64 (2.36-9+deb12u14 here) does not
  libc6:arm64
)

# The arm64 packages need the architecture enabled (once) before apt can see them.
if ! dpkg --print-foreign-architectures | grep -qx arm64; then
  SUDO=""; [ "$(id -u)" = 0 ] || SUDO=sudo
  $SUDO dpkg --add-architecture arm64
fi

missing=()
for p in "${PACKAGES[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
# nodejs/npm may come from elsewhere on a developer machine; accept any working node + npm.
if command -v node >/dev/null && command -v npm >/dev/null; then
  missing=("${missing[@]/nodejs}"); missing=("${missing[@]/npm}")
fi
read -r -a missing <<<"${missing[*]}"
if ((${#missing[@]})); then
  echo "setup: installing ${missing[*]}" >&2
  SUDO=""; [ "$(id -u)" = 0 ] || SUDO=sudo
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

for dir in tests/oracle/js tests/k8s tests/openapi; do
  if [ -f "$dir/package-lock.json" ]; then
    if [ ! -d "$dir/node_modules" ] || [ "$dir/package-lock.json" -nt "$dir/node_modules" ]; then
      echo "setup: installing the npm packages of $dir (npm ci)" >&2
      (cd "$dir" && npm ci --no-audit --no-fund --loglevel=error)
    fi
  fi
done
