#!/usr/bin/env bash
# Builds deploy/Containerfile where no container registry is reachable, and runs the image's kev.
#
#   deploy/check-image.sh            (as root, from anywhere; about 10 minutes on 2 cores)
#
# 1. mmdebstrap writes a Debian 12 root from the package archive this machine uses, and podman
#    imports it under the two base-image names the Containerfile asks for (debian:12 and
#    debian:12-slim: both are the same minimal root here, so the runtime image is ~85 MB
#    larger than with the real slim image);
# 2. podman builds the Containerfile with --pull=never (chroot isolation, vfs storage: no daemon,
#    no overlay mounts needed), so its only downloads are the Debian packages it installs;
# 3. the runtime image's root is mounted and its /usr/bin/kev started as uid 10001 with a
#    synthetic bundle (made by the host's kev) bound at /bundle: GET /health/ready, one
#    POST /v1/systemone, SIGTERM, exit 0. (`podman run` itself cannot set its rlimits inside
#    some sandboxes; chroot runs the same files.)
# Installs mmdebstrap and podman with apt if missing. Stops everything it started; removes its
# scratch directory and the container, keeps the image (localhost/kev-native:check).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
kev=${KEV_BIN:-$root/build/release/kev}
[ "$(id -u)" = 0 ] || { echo "check-image: needs root (mmdebstrap, podman, chroot)" >&2; exit 2; }
[ -x "$kev" ] || { echo "check-image: no kev at $kev (set KEV_BIN or run scripts/build.sh release)" >&2; exit 2; }
for tool in mmdebstrap podman; do
  command -v $tool >/dev/null ||
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends mmdebstrap podman crun >/dev/null
done
podman=(podman --storage-driver vfs)
work=$(mktemp -d -t kev-image.XXXXXX)
cid="" mnt="" pid=""
cleanup() {
  [ -n "$pid" ] && kill -KILL "$pid" 2>/dev/null || true
  [ -n "$mnt" ] && umount "$mnt/bundle" 2>/dev/null || true
  [ -n "$cid" ] && { "${podman[@]}" umount "$cid" >/dev/null 2>&1 || true; "${podman[@]}" rm "$cid" >/dev/null 2>&1 || true; }
  rm -rf "$work"
}
trap cleanup EXIT

echo "== 1. Debian 12 base root (mmdebstrap, from this machine's package archive)"
mmdebstrap --quiet --variant=apt --include=ca-certificates bookworm "$work/debian12.tar"
"${podman[@]}" import -q "$work/debian12.tar" docker.io/library/debian:12 >/dev/null
"${podman[@]}" tag docker.io/library/debian:12 docker.io/library/debian:12-slim

echo "== 2. podman build -f deploy/Containerfile (no registry: --pull=never)"
start=$(date +%s)
"${podman[@]}" build -q --pull=never --isolation chroot --network host -f "$root/deploy/Containerfile" \
  -t kev-native:check "$root" >/dev/null
echo "   built in $(( $(date +%s) - start )) s: $("${podman[@]}" image inspect kev-native:check --format '{{.Size}}') bytes"

echo "== 3. the image's kev, as uid 10001, on a synthetic bundle"
"$kev" synth --out "$work/synth" --quiet >/dev/null
"$kev" pin --model kev-4b --base "$work/synth/base" --checkpoint "$work/synth/checkpoint" --out "$work/recipe.json" >/dev/null
"$kev" export --recipe "$work/recipe.json" --base "$work/synth/base" --checkpoint "$work/synth/checkpoint" \
  --out "$work/bundle" --quiet
cid=$("${podman[@]}" create kev-native:check)
mnt=$("${podman[@]}" mount "$cid")
mkdir -p "$mnt/bundle" && mount --bind "$work/bundle" "$mnt/bundle"
chroot --userspec=10001:10001 "$mnt" /usr/bin/kev serve --bundle /bundle --host 127.0.0.1 --port 0 \
  >"$work/serve.out" 2>"$work/serve.err" &
pid=$!
for _ in $(seq 100); do [ -s "$work/serve.out" ] && break; sleep 0.1; done
port=$(sed -n 's/.*"listening":"[^"]*:\([0-9]*\)".*/\1/p' "$work/serve.out")
[ -n "$port" ] || { cat "$work/serve.err" >&2; echo "check-image: the server did not start" >&2; exit 1; }
curl -sf "http://127.0.0.1:$port/health/ready"; echo
curl -sf -X POST "http://127.0.0.1:$port/v1/systemone" -H 'Content-Type: application/json' \
  -d '{"state":{"order":7},"questions":{"next":{"type":"choice","instructions":"What next?","criteria":{"ship":"ship it","wait":"wait"}}}}'
echo
kill -TERM "$pid"
wait "$pid" && echo "== SIGTERM: exit 0" || { echo "check-image: exit $? after SIGTERM" >&2; exit 1; }
pid=""
