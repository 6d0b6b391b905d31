#!/usr/bin/env bash
# Runs one pipeline with two kev binaries (usage: cross_arch.sh KEV_A KEV_B [WORKDIR]) and checks
# that every output is byte-identical: for each binary and each kernel level it offers
# (`kev cpu`: every supported level of its architecture, forced with KEV_ISA), it exports the
# same synthetic checkpoint (bundle bytes: the LoRA merge), runs `kev forward` on fixed token
# rows (hidden states: the model GEMMs and vector kernels; fp32 with both GDN forms and int8)
# and `kev score` on fixed requests (answers and probabilities: the pointer head, fp32 and int8).
# The first binary's first level is the reference. bf16 is checked with the AVX512-BF16 dot
# kernel off (KEV_GEMM_ISA capped below avx512 on x86), the one variant documented to differ.
set -euo pipefail
kev_a=$1 kev_b=$2
work=${3:-$(mktemp -d -t kev-cross.XXXXXX)}
mkdir -p "$work"
here=$(cd "$(dirname "$0")/.." && pwd)

# Inputs, made once by the first binary (synth is not a kernel path; its bytes are checked too).
"$kev_a" synth --quiet --out "$work/synth" --seed 7
"$kev_a" pin --quiet --base "$work/synth/base" --checkpoint "$work/synth/checkpoint" \
  --out "$work/recipe.json"
python3 - "$work" <<'PY'
import json, sys
work = sys.argv[1]
state = 12345
def ids(n):
    global state
    out = []
    for _ in range(n):
        state = (state * 1103515245 + 12345) % 2**31
        out.append(state % 250)
    return out
# A prefix and rows that cross the GDN chunk (64) and the GEMM tiles (odd lengths, one token).
json.dump({"prefix": ids(70), "rows": [{"ids": ids(n)} for n in (1, 5, 67, 130)]},
          open(f"{work}/forward.json", "w"))
json.dump({"state": {"customer": "Ada", "cart": ["tea", "scones"], "note": "late delivery"},
           "questions": {
               "next_step": {"type": "choice", "instructions": "What should the agent do next?",
                             "criteria": {"ship": "confirm delivery", "refund": None,
                                          "escalate": "hand to a human"}},
               "upsell": {"type": "noul", "instructions": "Offer a discount?"},
               "mood": {"type": "score", "instructions": "How satisfied is the customer?",
                        "criteria": ["angry", "neutral", "happy"]}}},
          open(f"{work}/score.json", "w"))
PY

# The score response without latency_ms (wall time, the one field that may differ).
drop_latency() {
  python3 -c 'import json,sys; d=json.load(sys.stdin); d.pop("latency_ms"); json.dump(d, sys.stdout, sort_keys=True)'
}

# run_all NAME KEV ISA [ENV...]: every output of one binary at one level under $work/NAME.
run_all() {
  local name=$1 kev=$2 isa=$3 out=$work/$1
  shift 3
  mkdir -p "$out"
  env KEV_ISA="$isa" "$@" "$kev" export --quiet --recipe "$work/recipe.json" \
    --base "$work/synth/base" --checkpoint "$work/synth/checkpoint" --out "$out/bundle"
  for p in fp32 int8; do
    env KEV_ISA="$isa" "$@" "$kev" forward --quiet --bundle "$out/bundle" \
      --input "$work/forward.json" --output "$out/forward-$p.safetensors" --with-prefix --precision "$p"
    env KEV_ISA="$isa" "$@" "$kev" score --bundle "$out/bundle" --precision "$p" --decimals -1 \
      <"$work/score.json" | drop_latency >"$out/score-$p.json"
  done
  env KEV_ISA="$isa" "$@" "$kev" forward --quiet --bundle "$out/bundle" --gdn chunked \
    --input "$work/forward.json" --output "$out/forward-chunked.safetensors" --with-prefix
  local bf16_env=()
  [ "$isa" = avx512 ] && bf16_env=(KEV_GEMM_ISA=avx2)
  env KEV_ISA="$isa" "${bf16_env[@]}" "$@" "$kev" forward --quiet --bundle "$out/bundle" \
    --input "$work/forward.json" --output "$out/forward-bf16.safetensors" --precision bf16
  (cd "$out" && find . -type f | sort | xargs sha256sum) >"$out.sums"
}

levels() {  # the supported levels of a binary's architecture, from `kev cpu`
  "$1" cpu | python3 -c 'import json,sys; print(" ".join(k for k, v in json.load(sys.stdin)["supported"].items() if v and k in ("portable", "avx2", "avx512", "neon", "sve")))'
}

ref=""
status=0
for side in a b; do
  kev=$kev_a
  [ "$side" = b ] && kev=$kev_b
  for isa in $(levels "$kev"); do
    name="$side-$isa"
    echo "cross_arch: $name ($("$kev" cpu | python3 -c 'import json,sys; print(json.load(sys.stdin)["arch"])'))" >&2
    run_all "$name" "$kev" "$isa"
    if [ -z "$ref" ]; then
      ref=$name
      # The outputs must be real: a bundle with its manifest, hidden states, answers.
      test -s "$work/$ref/bundle/kev_export.json" && test -s "$work/$ref/forward-fp32.safetensors"
      grep -q '"next_step"' "$work/$ref/score-fp32.json"
    elif ! cmp -s "$work/$ref.sums" "$work/$name.sums"; then
      echo "cross_arch: $name differs from $ref:" >&2
      diff "$work/$ref.sums" "$work/$name.sums" >&2 || true
      status=1
    fi
  done
done
[ "$status" = 0 ] && echo "cross_arch: every output of every level is byte-identical to $ref" >&2
exit "$status"
