#!/usr/bin/env bash
# Installs the kev-native Debian package on a clean Debian 12 root and removes it again:
#
#   scripts/test_package.sh [kev-native_<version>-1_<arch>.deb]    (as root; ~5 minutes)
#
# Without an argument it builds the package first (scripts/package.sh). Steps:
#  1. mmdebstrap writes a minimal Debian 12 root (variant apt, from this machine's package
#     archive) holding only the package's declared dependencies (its Depends field), so a
#     missing dependency fails below; the root's file list is taken;
#  2. dpkg -i installs the package (dpkg, not apt: nothing may be pulled in that Depends lacks);
#  3. as an unprivileged user, the installed /usr/bin/kev runs synth, pin, export, verify and
#     score; the installed Python module answers the same request with the same bytes;
#  4. the unit: `systemd-analyze verify` where available; then its ExecStart line runs with the
#     environment of /etc/default/kev (edited as an administrator would: bundle and port), as an
#     unprivileged user, expanded as systemd expands it; GET /health/ready, POST /v1/systemone
#     (the same bytes as kev score), SIGTERM, exit 0. (systemd itself cannot run in a chroot.)
#  5. dpkg --purge; the root's file list must equal step 1's (dpkg's own bookkeeping, logs and
#     /tmp aside).
# scripts/test.sh runs this only with KEV_PACKAGE_TEST=1 (its time budget). KEV_PACKAGE_TEST_BASE=DIR
# copies a Debian root made before (mmdebstrap ... bookworm DIR) instead of making one (reruns);
# it must hold the package's dependencies.
set -euo pipefail
root_dir=$(cd "$(dirname "$0")/.." && pwd)
[ "$(id -u)" = 0 ] || { echo "test_package: needs root (mmdebstrap, chroot, dpkg)" >&2; exit 2; }
deb=${1:-}
if [ -z "$deb" ]; then
  "$root_dir/scripts/package.sh" >/dev/null
  deb=$(ls "$root_dir"/build/package/kev-native_*.deb)
fi
[ -f "$deb" ] || { echo "test_package: no package $deb" >&2; exit 2; }
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

echo "== 1. a clean Debian 12 root with the package's dependencies only"
depends=$(dpkg-deb -f "$deb" Depends | tr ',' '\n' | sed 's/|.*//; s/(.*)//; s/ //g' | grep -v '^$' |
          sort -u | paste -sd, -)
echo "   Depends: $depends"
if [ -n "${KEV_PACKAGE_TEST_BASE:-}" ]; then  # a root made before (faster reruns), copied
  cp -a "$KEV_PACKAGE_TEST_BASE" "$rootfs"
  chroot "$rootfs" dpkg-query -W ${depends//,/ } >/dev/null || fail "the base root lacks $depends"
else
  mmdebstrap --quiet --variant=apt --include="$depends" bookworm "$rootfs"
fi
mount -t proc proc "$rootfs/proc"
[ -c "$rootfs/dev/null" ] || fail "the root has no /dev/null (mmdebstrap makes its device nodes)"
file_list >"$work/before"

echo "== 2. dpkg -i $(basename "$deb")"
cp "$deb" "$rootfs/tmp/kev-native.deb"
in_root dpkg -i /tmp/kev-native.deb >/dev/null
for f in /usr/bin/kev /usr/share/man/man1/kev-serve.1 /usr/share/bash-completion/completions/kev \
         /usr/lib/systemd/system/kev.service /etc/default/kev /usr/share/kev/examples/typed-decisions.jsonl \
         /usr/lib/python3/dist-packages/kev_native/__init__.py /usr/lib/python3/dist-packages/kev_native/py.typed; do
  [ -e "$rootfs$f" ] || fail "$f is not installed"
done
# A packaged build has no test hooks (kev/core/test_hooks.h): no test-only knob in its binaries.
for knob in KEV_FAULT_WRITE_AFTER_BYTES KEV_AVX512_EMULATE; do
  ! grep -rqa "$knob" "$rootfs/usr/bin/kev" "$rootfs/usr/lib/python3/dist-packages/kev_native" ||
    fail "the installed kev holds the test-only knob $knob"
done

echo "== 3. kev synth, pin, export, verify, score from /usr/bin (as nobody)"
mkdir -m 777 "$rootfs/tmp/w"
as_user sh -ec 'cd /tmp/w
  kev synth --out synth --quiet --seed 4 >/dev/null
  kev pin --base synth/base --checkpoint synth/checkpoint --out recipe.json >/dev/null
  kev export --recipe recipe.json --base synth/base --checkpoint synth/checkpoint --out bundle --quiet >/dev/null
  kev verify bundle >/dev/null'
request='{"state":{"order":7,"note":"late twice"},"questions":{"next":{"type":"choice","instructions":"What next?","criteria":{"ship":"ship it","wait":"wait"}},"vip":{"type":"noul","instructions":"A VIP?"}}}'
no_latency() { sed -E 's/"latency_ms":[-0-9.eE+]+/"latency_ms":0/'; }
score=$(printf '%s' "$request" | as_user kev score --bundle /tmp/w/bundle | no_latency)
echo "   kev score: $score"
[[ $score == *'"answers":{"next":'* ]] || fail "kev score gave no answers"
py=$(printf '%s' "$request" | in_root python3 -c '
import sys, kev_native
print(kev_native.Model("/tmp/w/bundle").system_one_json(sys.stdin.read()))' | no_latency)
[ "$py" = "$score" ] || fail "the Python module answered $py"
echo "   python3 -c 'import kev_native': the same bytes"

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

echo "== 5. dpkg --purge: nothing left behind"
rm -rf "$rootfs/tmp/w" "$rootfs/tmp/kev-native.deb"
in_root dpkg --purge kev-native >/dev/null
file_list >"$work/after"
if ! diff -u "$work/before" "$work/after" >"$work/diff"; then
  cat "$work/diff" >&2; fail "files differ after the purge"
fi
echo "   the root's $(wc -l <"$work/before") paths are as before"
echo "test_package: OK"
