#!/usr/bin/env bash
# The acceptance recipe of docs/acceptance.md, end to end on a synthetic Kev-4B-layout model:
# export, answers of the reference side (here fp32 kev; for a real model, the answers saved
# from the upstream server), a kev serve with --precision int8 measured and answered through
# kev bench at concurrency 1, 8 and 16, kev compare with the gates (fp32 against itself: zero
# drift; int8 against fp32: the parity budget; a deliberately perturbed file: caught), and
# kev calibrate on the example's labels. Exits non-zero if any of those does not hold.
#   KEV_BIN (default build/release/kev) is the binary; KEV_DEMO_DIR (default: a new temporary
#   directory) holds everything it writes. The server listens on 127.0.0.1 only.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
kev=${KEV_BIN:-$root/build/release/kev}
[ -x "$kev" ] || { echo "acceptance-demo: no kev binary at $kev (scripts/build.sh release, or set KEV_BIN)" >&2; exit 2; }
requests=$root/examples/typed-decisions.jsonl
work=${KEV_DEMO_DIR:-$(mktemp -d -t kev-acceptance.XXXXXX)}
mkdir -p "$work"
cd "$work"
rm -rf synth bundle recipe.json ./*.jsonl ./*.svg serve.out serve.log

echo "== 1. export a synthetic model"
"$kev" synth --out synth --quiet
"$kev" pin --model kev-4b --base synth/base --checkpoint synth/checkpoint --out recipe.json >/dev/null
"$kev" export --recipe recipe.json --base synth/base --checkpoint synth/checkpoint --out bundle --quiet

echo "== 2. reference answers (fp32; for a real model: the upstream server's answers, one JSON body a line)"
"$kev" score --bundle bundle --jsonl < "$requests" > reference.jsonl

echo "== 3. kev serve --precision int8 on 127.0.0.1, measured by kev bench at concurrency 1, 8, 16"
"$kev" serve --bundle bundle --precision int8 --host 127.0.0.1 --port 0 > serve.out 2> serve.log &
server=$!
trap 'kill "$server" 2>/dev/null || true' EXIT
for _ in $(seq 1 600); do
  grep -q listening serve.out 2>/dev/null && break
  sleep 0.1
done
url=$(sed -n 's/.*"listening":"\([^"]*\)".*/\1/p' serve.out | head -1)
[ -n "$url" ] || { echo "acceptance-demo: kev serve did not start: $(cat serve.log)" >&2; exit 1; }
"$kev" bench "$requests" --url "$url" --concurrency 1,8,16 --out int8-bench.jsonl --svg latency.svg
kill "$server"
wait "$server" 2>/dev/null || true
trap - EXIT

echo "== 4. compare: fp32 against itself (zero drift, no flip)"
"$kev" compare reference.jsonl reference.jsonl --max-probability-drift 0 --max-flips 0 --worst 3

echo "== 5. compare: int8 (kev bench's saved answers) against fp32, the parity budget"
"$kev" compare reference.jsonl int8-bench.jsonl --max-probability-drift 0.03 \
  --max-flips-above-margin 0.02 --worst 3

echo "== 5b. the same at temperature 0.5 (sharper probabilities), reported, not gated: on this"
echo "       example int8 exceeds the budget on most synthetic seeds (docs/acceptance.md)"
KEV_TEMPERATURE=0.5 "$kev" score --bundle bundle --jsonl < "$requests" > reference-t05.jsonl
KEV_TEMPERATURE=0.5 "$kev" score --bundle bundle --jsonl --precision int8 < "$requests" > int8-t05.jsonl
"$kev" compare reference-t05.jsonl int8-t05.jsonl --worst 0 | grep -E "max [|]dp[|]|argmax flips"

echo "== 6. compare: a deliberately perturbed copy (0.05 moved between two options of one answer)"
/usr/bin/env python3 - reference.jsonl perturbed.jsonl <<'PY'
import json, sys
recs = [json.loads(l) for l in open(sys.argv[1])]
a = recs[len(recs) // 2]["answers"]["route"]["probabilities"]
hi, lo = max(a, key=a.get), min(a, key=a.get)
a[hi], a[lo] = round(a[hi] - 0.05, 6), round(a[lo] + 0.05, 6)
open(sys.argv[2], "w").write("".join(json.dumps(r) + "\n" for r in recs))
PY
set +e
"$kev" compare reference.jsonl perturbed.jsonl --max-probability-drift 0.03 --max-flips 0 --worst 1
status=$?
set -e
[ "$status" = 1 ] || { echo "acceptance-demo: the gates did not catch the perturbation (exit $status)" >&2; exit 1; }
echo "(exit 1: caught, as it must be)"

echo "== 7. calibrate: temperature fitted on the example's labels (synthetic: no real signal)"
"$kev" calibrate --bundle bundle --labels "$requests" --svg reliability.svg

echo "acceptance-demo: all checks held; files in $work"
