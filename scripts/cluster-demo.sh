#!/usr/bin/env bash
# Scale-out demo on loopback: 3 `kev serve` replicas on the synthetic bundle behind HAProxy
# (configuration from deploy/haproxy/kev-haproxy-cfg.py), a short load of growing conversations
# (each turn's state is the turn before plus a line) with X-Kev-State-Key set to the
# conversation, then per-replica request counts and each replica's reused / computed state tokens
# from its /health; then a rolling restart of every replica (SIGTERM, a new process on the same
# port and the same shared --state-dir) and one more turn of each conversation, which continues
# from the saved states on disk. Stops every process it started, by pid, on any exit.
#   KEV_BIN (default build/release/kev, built if missing), KEV_DEMO_DIR (default: a new
#   temporary directory), DEMO_REQUESTS (default 120), DEMO_STATES (conversations, default 24),
#   DEMO_AFFINITY (header | none; default header).
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
command -v haproxy >/dev/null || [ -x /usr/sbin/haproxy ] || {
  echo "cluster-demo: haproxy is not installed (scripts/setup.sh installs it)" >&2; exit 1; }
haproxy=$(command -v haproxy || echo /usr/sbin/haproxy)
kev=${KEV_BIN:-$root/build/release/kev}
[ -x "$kev" ] || scripts/build.sh release
work=${KEV_DEMO_DIR:-$(mktemp -d -t kev-cluster.XXXXXX)}
mkdir -p "$work"
requests=${DEMO_REQUESTS:-120} states=${DEMO_STATES:-24} affinity=${DEMO_AFFINITY:-header}

pids=()
cleanup() {
  for pid in "${pids[@]}"; do kill "$pid" 2>/dev/null || true; done
  for pid in "${pids[@]}"; do wait "$pid" 2>/dev/null || true; done
}
trap cleanup EXIT

if [ ! -f "$work/bundle/kev_export.json" ]; then
  echo "== synthesize + pin + export a tiny bundle in $work"
  rm -rf "$work/synth" "$work/bundle"
  "$kev" synth --out "$work/synth" --quiet
  "$kev" pin --model kev-4b --base "$work/synth/base" --checkpoint "$work/synth/checkpoint" --out "$work/recipe.json"
  "$kev" export --recipe "$work/recipe.json" --base "$work/synth/base" \
    --checkpoint "$work/synth/checkpoint" --out "$work/bundle" --quiet
fi

states_dir=$work/states  # shared by the replicas (docs/saved-states.md)
# start_replica I PORT: replica I on PORT (0: a free one); sets pids[I-1] and ports[I-1].
start_replica() {
  local i=$1 fifo=$work/listen-$1 line
  rm -f "$fifo"; mkfifo "$fifo"
  "$kev" serve --bundle "$work/bundle" --port "$2" --threads 1 --drain-delay 2 --quiet \
    --state-dir "$states_dir" >"$fifo" &
  pids[$((i - 1))]=$!
  read -r -t 60 line <"$fifo" || { echo "cluster-demo: replica $i did not start" >&2; exit 1; }
  ports[$((i - 1))]=$(sed -E 's/.*"http:\/\/127\.0\.0\.1:([0-9]+)".*/\1/' <<<"$line")
}

echo "== start 3 replicas (kev serve --port 0 --threads 1 --drain-delay 2 --state-dir $states_dir)"
ports=()
for i in 1 2 3; do
  start_replica "$i" 0
  echo "   r$i pid ${pids[$((i - 1))]} on 127.0.0.1:${ports[$((i - 1))]}"
done

lb_port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
python3 deploy/haproxy/kev-haproxy-cfg.py --bind "127.0.0.1:$lb_port" --affinity "$affinity" \
  --stats-socket "$work/haproxy.sock" --check-inter 500ms \
  $(for p in "${ports[@]}"; do echo --replica "127.0.0.1:$p"; done) >"$work/haproxy.cfg"
"$haproxy" -c -q -f "$work/haproxy.cfg"
"$haproxy" -db -f "$work/haproxy.cfg" >"$work/haproxy.log" 2>&1 &
pids+=($!)
echo "== HAProxy pid ${pids[-1]} on 127.0.0.1:$lb_port (config $work/haproxy.cfg, affinity: $affinity)"

load() {  # load FIRST_REQUEST REQUESTS: requests FIRST.. of the conversations through HAProxy
python3 - "$lb_port" "$1" "$2" "$states" "${ports[@]}" <<'PY'
import json, sys, time, urllib.request, urllib.error
from concurrent.futures import ThreadPoolExecutor
lb, first, n, k = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
ports = [int(p) for p in sys.argv[5:]]

def get(port, path):
    with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=10) as r:
        return json.load(r)

end = time.monotonic() + 30  # every replica ready through the balancer
while time.monotonic() < end:
    try:
        if get(lb, "/health/ready")["status"] == "ready" and all(get(p, "/health")["ready"] for p in ports):
            break
    except (OSError, ValueError):
        pass
    time.sleep(0.2)
time.sleep(1.5)  # HAProxy's rise (2 checks of 500 ms)
before = [get(p, "/health") for p in ports]

def one(i):
    # Conversation i % k at turn i // k: its state grows by one line a turn, so the state's hash
    # changes every turn; the affinity key is the conversation.
    conv, turn = i % k, i // k
    lines = [f"turn {t}: the customer asked about the delivery date of order {conv * 100 + t}" for t in range(turn + 1)]
    state = {"session": conv, "history": lines}
    body = json.dumps({"state": state, "questions": {"q": {"type": "noul", "instructions": "Escalate?"}}}).encode()
    key = f"conversation-{conv}"
    req = urllib.request.Request(f"http://127.0.0.1:{lb}/v1/systemone", body,
                                 {"Content-Type": "application/json", "X-Kev-State-Key": key})
    for _ in range(20):  # a 503 with Retry-After is retried
        try:
            with urllib.request.urlopen(req, timeout=120) as r:
                return r.status, r.headers.get("X-Kev-Replica")
        except urllib.error.HTTPError as e:
            if e.code != 503 or not e.headers.get("Retry-After"):
                return e.code, e.headers.get("X-Kev-Replica")
            time.sleep(0.2)
    return 503, None

t0 = time.monotonic()
with ThreadPoolExecutor(4) as pool:
    results = list(pool.map(one, range(first, first + n)))
dt = time.monotonic() - t0
ok = sum(1 for s, _ in results if s == 200)
print(f"== {n} requests ({k} growing conversations, 4 client threads) in {dt:.2f} s: {ok} answered 200, "
      f"{n - ok} failed")
reused = computed = 0
for i, p in enumerate(ports, 1):
    h, b = get(p, "/health"), before[i - 1]
    c, cb = h["cache"], b["cache"]
    r, m = c["reused_tokens"] - cb["reused_tokens"], c["computed_tokens"] - cb["computed_tokens"]
    disk = h["state_dir"]["hits"] - b["state_dir"]["hits"]
    reused, computed = reused + r, computed + m
    served = sum(1 for _, x in results if x == f"r{i}")
    print(f"   r{i}: {served:4d} requests, state tokens reused {r} / computed {m}, "
          f"restored from disk {disk} times")
share = reused / (reused + computed) if reused + computed else 0.0
print(f"   all: {share:.2f} of the state tokens continued from saved points")
sys.exit(0 if ok == n else 1)
PY
}
load 0 "$requests"

echo "== rolling restart: each replica drained (SIGTERM) and started again on its port"
for i in 1 2 3; do
  kill -TERM "${pids[$((i - 1))]}"
  wait "${pids[$((i - 1))]}" || true
  start_replica "$i" "${ports[$((i - 1))]}"
  echo "   r$i pid ${pids[$((i - 1))]} on 127.0.0.1:${ports[$((i - 1))]}"
done
echo "== the next turn of every conversation, on restarted replicas (memory caches empty)"
load "$requests" "$states"
echo "== stopping HAProxy and the replicas (SIGTERM by pid)"
