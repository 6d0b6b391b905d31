#!/usr/bin/env bash
# The CI run as a busy CI host sees it: a fresh clone of this checkout's HEAD (in a new temporary
# folder, or KEV_CI_CLONE) runs scripts/test.sh with CPU hogs beside it, and the load average is
# sampled every 30 s; at the end it prints the run's wall time and the load it ran under.
#   KEV_HOGS (default 2) busy loops: with the suite's own two jobs on a 2-core machine, a load
#   average of about 4. KEV_HOGS=0 times a quiet fresh-clone run. Arguments go to scripts/test.sh.
#   KEV_CCACHE_COLD=1 gives the run an empty compiler cache of its own (a new CI machine).
set -euo pipefail
cd "$(dirname "$0")/.."
clone=${KEV_CI_CLONE:-$(mktemp -d -t kev-ci.XXXXXX)/kev}
git clone -q . "$clone"
if [ "${KEV_CCACHE_COLD:-0}" = 1 ]; then
  export CCACHE_DIR=$clone.ccache
fi
hogs=()
sampler=""
stop() {
  for pid in "${hogs[@]}" $sampler; do kill "$pid" 2>/dev/null || true; done
}
trap stop EXIT
for _ in $(seq "${KEV_HOGS:-2}"); do
  (while :; do :; done) &
  hogs+=("$!")
done
loads=$clone.loadavg
(while :; do cut -d' ' -f1 /proc/loadavg >>"$loads"; sleep 30; done) &
sampler=$!
echo "ci_under_load: $clone, ${#hogs[@]} CPU hogs on $(nproc) cores" >&2
start=$SECONDS
status=0
(cd "$clone" && scripts/test.sh "$@") || status=$?
stop
echo "ci_under_load: scripts/test.sh $* exited $status after $(((SECONDS - start) / 60)) min" \
  "$(((SECONDS - start) % 60)) s with ${#hogs[@]} hogs; load average (1 min) mean and max:" \
  "$(awk '{s += $1; if ($1 > m) m = $1} END {printf "%.1f %.1f", s / NR, m}' "$loads")" >&2
exit "$status"
