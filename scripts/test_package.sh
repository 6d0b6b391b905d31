#!/usr/bin/env bash
# Installs the Debian packages kev-native and python3-kev-native on a clean Debian 12 root and
# removes them again:
#
#   scripts/test_package.sh [KEV_NATIVE_DEB [PYTHON3_KEV_NATIVE_DEB]]    (as root; ~5 minutes)
#     KEV_NATIVE_DEB          kev-native_<version>-1_<arch>.deb
#     PYTHON3_KEV_NATIVE_DEB  python3-kev-native_<version>-1_<arch>.deb (default: the one of the
#                             same version and architecture beside KEV_NATIVE_DEB)
#
# Without an argument it builds the packages first (scripts/package.sh). Steps:
#  1. kev-native's Depends must name nothing of Python (python3*, libpython*), and
#     python3-kev-native's must name kev-native of the same version; mmdebstrap writes a minimal
#     Debian 12 root (variant apt, from this machine's package archive) holding only
#     kev-native's declared dependencies (its Depends field), so a missing dependency fails
#     below, and downloads, without installing them, the packages python3-kev-native's Depends
#     adds (into the root's var/cache/kev-python-debs); the root's file list is taken;
#  2. dpkg -i installs kev-native (dpkg, not apt: nothing may be pulled in that Depends lacks);
#     it installs no Python module, and the root has no python3;
#  3. as an unprivileged user, the installed /usr/bin/kev runs synth, pin, export, verify and
#     score (with no Python in the root);
#  4. the unit: `systemd-analyze verify` where available; then its ExecStart line runs with the
#     environment of /etc/default/kev (edited as an administrator would: bundle and port), as an
#     unprivileged user, expanded as systemd expands it; GET /health/ready, POST /v1/systemone
#     (the same bytes as kev score), SIGTERM, exit 0. (systemd itself cannot run in a chroot.)
#  5. dpkg --purge kev-native; the root's file list must equal step 1's (dpkg's own bookkeeping,
#     logs, caches and /tmp aside);
#  6. python3-kev-native's dependencies are installed from step 1's downloads alone (apt orders
#     them, with no sources: nothing else to choose from) and the root's file list is taken;
#     dpkg -i installs kev-native, then python3-kev-native; the installed Python module (imported
#     as root) answers step 3's request with kev score's bytes; dpkg --purge python3-kev-native,
#     then kev-native: the root's file list must equal the one taken before them (the module's
#     byte-code caches gone too).
# scripts/test.sh runs this only with KEV_PACKAGE_TEST=1 (its time budget). KEV_PACKAGE_TEST_BASE=DIR
# copies a Debian root made before instead of making one (reruns): made as step 1 makes it
# (mmdebstrap --variant=apt --include=<kev-native's Depends> with the customize hook below,
# bookworm DIR), it holds kev-native's dependencies, no python3, and python3-kev-native's
# dependencies as .debs in DIR/var/cache/kev-python-debs.
set -euo pipefail
root_dir=$(cd "$(dirname "$0")/.." && pwd)
[ "$(id -u)" = 0 ] || { echo "test_package: needs root (mmdebstrap, chroot, dpkg)" >&2; exit 2; }
deb=${1:-}
py_deb=${2:-}
if [ -z "$deb" ]; then
  "$root_dir/scripts/package.sh" >/dev/null
  deb=$(ls "$root_dir"/build/package/kev-native_*.deb)
fi
[ -f "$deb" ] || { echo "test_package: no package $deb" >&2; exit 2; }
version=$(dpkg-deb -f "$deb" Version)
if [ -z "$py_deb" ]; then
  py_deb=$(dirname "$deb")/python3-kev-native_${version}_$(dpkg-deb -f "$deb" Architecture).deb
fi
[ -f "$py_deb" ] || { echo "test_package: no package $py_deb" >&2; exit 2; }
command -v mmdebstrap >/dev/null ||
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends mmdebstrap >/dev/null

work=$(mktemp -d -t kev-pkgtest.XXXXXX)
rootfs=$work/root
pid=""
# Nothing of the host is bound into the root (its /dev is mmdebstrap's own nodes); /proc is the
# one mount, and the scratch directory is removed only once nothing is mounted below it, and then
# without crossing into another file system.
cleanup() {
  [ -n "$pid" ] && { kill -KILL "$pid" 2>/dev/null; wait "$pid" 2>/dev/null; } || true
  if mountpoint -q "$rootfs/proc" 2>/dev/null; then
    umount "$rootfs/proc" 2>/dev/null || umount -l "$rootfs/proc" || true
  fi
  if grep -q " $work/" /proc/mounts; then
    echo "test_package: something is still mounted under $work; not removing it" >&2
  else
    rm -rf --one-file-system "$work"
  fi
}
trap cleanup EXIT
fail() { echo "test_package: $*" >&2; exit 1; }
in_root() { chroot "$rootfs" "$@"; }
as_user() { chroot --userspec=65534:65534 "$rootfs" env -i PATH=/usr/bin:/bin HOME=/tmp "$@"; }
# Every path of the root but those that change on their own (dpkg's status and logs, caches,
# /tmp, the kernel's file systems).
file_list() {
  (cd "$rootfs" && find . -xdev \( -path ./proc -o -path ./dev -o -path ./sys -o -path ./run \
      -o -path ./tmp -o -path ./var/log -o -path ./var/cache -o -path ./var/lib/apt \) -prune \
      -o -print | grep -Ev '^\./var/lib/dpkg/(status|available|lock.*|.*-old|triggers/.*|diversions|statoverride)$' | sort)
}

# The package names of a Depends field, one a line (alternatives and versions dropped).
depends_of() { dpkg-deb -f "$1" Depends | tr ',' '\n' | sed 's/|.*//; s/(.*)//; s/ //g' | grep -v '^$' | sort -u; }
# A packaged build has no test hooks (kev/core/test_hooks.h): no test-only knob in its binaries.
no_test_knobs() {
  for knob in KEV_FAULT_WRITE_AFTER_BYTES KEV_AVX512_EMULATE; do
    ! grep -rqa "$knob" "$@" || fail "the installed $* holds the test-only knob $knob"
  done
}
py_dir=/usr/lib/python3/dist-packages/kev_native
py_debs=/var/cache/kev-python-debs  # in the root; /var/cache is outside file_list

echo "== 1. a clean Debian 12 root with kev-native's dependencies only"
depends=$(depends_of "$deb" | paste -sd, -)
echo "   kev-native Depends: $depends"
python_deps=$(depends_of "$deb" | grep -E '^(python3|libpython)' | paste -sd' ' -) || true
[ -z "$python_deps" ] || fail "kev-native depends on $python_deps: Python belongs to python3-kev-native"
py_depends_field=$(dpkg-deb -f "$py_deb" Depends)
echo "   python3-kev-native Depends: $py_depends_field"
tr ',' '\n' <<<"$py_depends_field" | sed 's/^ *//; s/ *$//' | grep -qxF "kev-native (= $version)" ||
  fail "python3-kev-native does not depend on kev-native (= $version)"
for p in python3 python3-numpy; do
  depends_of "$py_deb" | grep -qx "$p" || fail "python3-kev-native does not depend on $p"
done
py_depends=$(depends_of "$py_deb" | grep -vx kev-native | paste -sd' ' -)
# The packages python3-kev-native's Depends adds, downloaded (not installed) with the root's apt
# state and sources while mmdebstrap has them.
download_hook="mkdir -p \"\$1$py_debs/partial\" && APT_CONFIG=\"\$MMDEBSTRAP_APT_CONFIG\" apt-get \
--quiet --yes --download-only --no-install-recommends -o Dir::Cache::Archives=\"\$1$py_debs/\" \
install $py_depends >/dev/null && rm -rf \"\$1$py_debs/partial\" \"\$1$py_debs/lock\""
if [ -n "${KEV_PACKAGE_TEST_BASE:-}" ]; then  # a root made before (faster reruns), copied
  cp -a "$KEV_PACKAGE_TEST_BASE" "$rootfs"
  chroot "$rootfs" dpkg-query -W ${depends//,/ } >/dev/null || fail "the base root lacks $depends"
else
  mmdebstrap --quiet --variant=apt --include="$depends" --customize-hook="$download_hook" \
    bookworm "$rootfs"
fi
compgen -G "$rootfs$py_debs/*.deb" >/dev/null || fail "the root has no $py_debs/*.deb"
echo "   python3-kev-native adds $(ls "$rootfs$py_debs" | wc -l) packages (downloaded, not installed)"
mount -t proc proc "$rootfs/proc"
[ -c "$rootfs/dev/null" ] || fail "the root has no /dev/null (mmdebstrap makes its device nodes)"
file_list >"$work/before"

echo "== 2. dpkg -i $(basename "$deb")"
cp "$deb" "$rootfs/tmp/kev-native.deb"
cp "$py_deb" "$rootfs/tmp/python3-kev-native.deb"
in_root dpkg -i /tmp/kev-native.deb >/dev/null
for f in /usr/bin/kev /usr/share/man/man1/kev-serve.1 /usr/share/bash-completion/completions/kev \
         /usr/lib/systemd/system/kev.service /etc/default/kev /usr/share/kev/examples/typed-decisions.jsonl; do
  [ -e "$rootfs$f" ] || fail "$f is not installed"
done
[ ! -e "$rootfs$py_dir" ] || fail "kev-native installs the Python module $py_dir"
for p in python3 python3-numpy; do
  ! in_root dpkg-query -W -f '${Status}' "$p" 2>/dev/null | grep -q ' installed$' || fail "$p is in the root"
done
[ ! -e "$rootfs/usr/bin/python3" ] || fail "the root has /usr/bin/python3"
echo "   no Python in the root"
no_test_knobs "$rootfs/usr/bin/kev"

echo "== 3. kev synth, pin, export, verify, score from /usr/bin (as nobody, no Python)"
mkdir -m 777 "$rootfs/tmp/w"
as_user sh -ec 'cd /tmp/w
  kev synth --out synth --quiet --seed 4 >/dev/null
  kev pin --model kev-4b --base synth/base --checkpoint synth/checkpoint --out recipe.json >/dev/null
  kev export --recipe recipe.json --base synth/base --checkpoint synth/checkpoint --out bundle --quiet >/dev/null
  kev verify bundle >/dev/null'
request='{"state":{"order":7,"note":"late twice"},"questions":{"next":{"type":"choice","instructions":"What next?","criteria":{"ship":"ship it","wait":"wait"}},"vip":{"type":"noul","instructions":"A VIP?"}}}'
no_latency() { sed -E 's/"latency_ms":[-0-9.eE+]+/"latency_ms":0/'; }
score=$(printf '%s' "$request" | as_user kev score --bundle /tmp/w/bundle | no_latency)
echo "   kev score: $score"
[[ $score == *'"answers":{"next":'* ]] || fail "kev score gave no answers"

echo "== 4. the systemd unit"
unit=$rootfs/usr/lib/systemd/system/kev.service
if command -v systemd-analyze >/dev/null; then
  # On this machine's systemd (the root has none): the unit as installed, its ExecStart binary
  # the root's. Any finding (an unknown option, a bad value) fails the test.
  sed "s|^ExecStart=/usr/bin/kev |ExecStart=$rootfs/usr/bin/kev |" "$unit" >"$work/kev.service"
  out=$(systemd-analyze verify --man=no "$work/kev.service" 2>&1) || { echo "$out" >&2; fail "systemd-analyze verify refused the unit"; }
  [ -z "$out" ] || { echo "$out" >&2; fail "systemd-analyze verify found problems"; }
  echo "   systemd-analyze verify: clean"
else
  echo "   no systemd-analyze here: the unit is not verified"
fi
for opt in DynamicUser=yes ProtectSystem=strict ProtectHome=yes NoNewPrivileges=yes \
           EnvironmentFile=/etc/default/kev; do
  grep -qx "$opt" "$unit" || fail "the unit lacks $opt"
done
port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
sed -i "s|^KEV_BUNDLE=.*|KEV_BUNDLE=/tmp/w/bundle|; s|^KEV_PORT=.*|KEV_PORT=$port|" "$rootfs/etc/default/kev"
# ExecStart expanded as systemd does: ${VAR} one word, $VAR split at whitespace.
mapfile -d '' argv < <(python3 - "$unit" "$rootfs/etc/default/kev" <<'EOF'
import re, shlex, sys
env = {}
for line in open(sys.argv[2]):
    line = line.strip()
    if line and not line.startswith("#"):
        k, _, v = line.partition("=")
        env[k] = v
exec_start = next(l.split("=", 1)[1] for l in open(sys.argv[1]) if l.startswith("ExecStart="))
words = []
for w in shlex.split(exec_start):
    m = re.fullmatch(r"\$(\w+)", w)
    if m:
        words += env.get(m.group(1), "").split()
    else:
        words.append(re.sub(r"\$\{(\w+)\}", lambda m: env.get(m.group(1), ""), w))
sys.stdout.write("\0".join(words) + "\0")
EOF
)
echo "   ExecStart: ${argv[*]}"
# chroot and env exec: $! is kev serve itself.
chroot --userspec=65534:65534 "$rootfs" env -i PATH=/usr/bin:/bin HOME=/tmp "${argv[@]}" \
  >"$work/serve.out" 2>"$work/serve.err" &
pid=$!
for _ in $(seq 300); do curl -sf "http://127.0.0.1:$port/health/ready" >/dev/null 2>&1 && break; sleep 0.1; done
curl -sf "http://127.0.0.1:$port/health/ready" >/dev/null || { cat "$work/serve.err" >&2; fail "kev serve did not start"; }
served=$(curl -sf -X POST "http://127.0.0.1:$port/v1/systemone" -H 'Content-Type: application/json' \
         -d "$request" | no_latency)
[ "$served" = "$score" ] || fail "kev serve answered $served"
echo "   kev serve (ExecStart, /etc/default/kev): the same bytes"
kill -TERM "$pid"
wait "$pid" || fail "kev serve exited $? after SIGTERM"
pid=""
echo "   SIGTERM: exit 0"

# The root's file list must equal the one in $1 (named $2).
same_files() {
  file_list >"$work/after"
  if ! diff -u "$1" "$work/after" >"$work/diff"; then
    cat "$work/diff" >&2; fail "files differ after the purge"
  fi
  echo "   the root's $(wc -l <"$1") paths are as $2"
}

echo "== 5. dpkg --purge kev-native: nothing left behind"
in_root dpkg --purge kev-native >/dev/null
same_files "$work/before" "before"

echo "== 6. python3-kev-native"
# Step 1's downloads, exactly: apt only orders them (python3's Pre-Depends), from these files
# alone (no sources).
in_root sh -c "apt-get install --quiet --yes --no-install-recommends -o Dir::Etc::SourceList=/dev/null \
  -o Dir::Etc::SourceParts=/dev/null $py_debs/*.deb" >"$work/apt.log" 2>&1 ||
  { cat "$work/apt.log" >&2; fail "the dependencies of python3-kev-native did not install"; }
file_list >"$work/before-python"
echo "   its dependencies installed from step 1's downloads: $py_depends"
in_root dpkg -i /tmp/kev-native.deb >/dev/null
in_root dpkg -i /tmp/python3-kev-native.deb >/dev/null
for f in "$py_dir/__init__.py" "$py_dir/py.typed" "$py_dir/_core.pyi"; do
  [ -e "$rootfs$f" ] || fail "$f is not installed"
done
no_test_knobs "$rootfs$py_dir"
# As root, in a clean environment: the import writes the module's byte-code cache, which the
# purge below must remove.
py=$(printf '%s' "$request" | in_root env -i PATH=/usr/bin:/bin python3 -c '
import sys, kev_native
print(kev_native.Model("/tmp/w/bundle").system_one_json(sys.stdin.read()))' | no_latency)
[ "$py" = "$score" ] || fail "the Python module answered $py"
echo "   python3 -c 'import kev_native': the same bytes as kev score"
[ -d "$rootfs$py_dir/__pycache__" ] || fail "importing kev_native as root wrote no $py_dir/__pycache__"
in_root dpkg --purge python3-kev-native >/dev/null
in_root dpkg --purge kev-native >/dev/null
same_files "$work/before-python" "before python3-kev-native and kev-native"
rm -rf "$rootfs/tmp/w" "$rootfs/tmp/kev-native.deb" "$rootfs/tmp/python3-kev-native.deb"
echo "test_package: OK"
