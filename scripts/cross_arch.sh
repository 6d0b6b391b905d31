#!/usr/bin/env bash
# Runs one pipeline with one or two kev binaries (usage: cross_arch.sh KEV_A [KEV_B]): for each
# binary and each kernel level it offers
# (`kev cpu`: every supported level of its architecture, forced with KEV_ISA), it exports the
# same synthetic checkpoint (bundle bytes: the LoRA merge), runs `kev forward` on fixed token
# rows (hidden states: the model GEMMs and vector kernels; fp32 with both GDN forms, int8, w8a8,
# bf16) and `kev score` on fixed requests (answers and probabilities: the pointer head, fp32 and
# int8; with --state-dir, so the saved state files it writes are compared too), and makes a q4z
# bundle with `kev quantize` and scores it in int8 and w8a8, and one with q8, q5, q5z, q4 and q4z rows
# scored in int8 (the quantized bundles' bytes and their answers).
# Within a binary every level must give the same bytes as its first level, in every output,
# and across the binaries every output must be byte-identical too: bundles, hidden states and
# answers with their probabilities (the model's exp, log1p, sin, cos and pow are its own fixed
# sequences of IEEE operations, include/kev/core/fixed_math.h, not the platform's libm). bf16 is
# checked with the AVX512-BF16 dot kernel off (KEV_GEMM_ISA capped below avx512 on x86), the one
# variant documented to differ.
#   KEV_CROSS_WIDE=1 runs the forward (every precision, both GDN forms) on a second model too,
#   at Qwen3.5-0.8B's per-layer widths (hidden 1024, MLP 3584, 8 x 256 attention heads, 16 x 128
#   GDN heads; 4 layers), the shapes oracle/test_precision.py holds to its budgets: GEMM tiles
#   and head counts the tiny model's widths never reach.
#   KEV_CROSS_WORK keeps the files in that folder (default: a new temporary one).
set -euo pipefail
kev_a=$1 kev_b=${2:-}
work=${KEV_CROSS_WORK:-$(mktemp -d -t kev-cross.XXXXXX)}
mkdir -p "$work"
binaries=(a)
[ -z "$kev_b" ] || binaries+=(b)
models=(tiny)
[ "${KEV_CROSS_WIDE:-0}" != 1 ] || models+=(wide)
synth_tiny=(--seed 7)
synth_wide=(--seed 7 --hidden 1024 --intermediate 3584 --layers 4 --heads 8 --kv-heads 2
  --head-dim 256 --linear-key-heads 16 --linear-value-heads 16 --linear-key-dim 128
  --linear-value-dim 128)

# Inputs, made by the first binary. synth is not a kernel path, but its bytes are checked too:
# the second binary makes the same checkpoints, which must be identical file for file.
tree_sums() { (cd "$1" && find . -type f | sort | xargs sha256sum); }
for model in "${models[@]}"; do
  declare -n synth_args="synth_$model"
  "$kev_a" synth --quiet --out "$work/synth-$model" "${synth_args[@]}"
  if [ -n "$kev_b" ]; then
    "$kev_b" synth --quiet --out "$work/synth-$model-b" "${synth_args[@]}"
    if ! cmp -s <(tree_sums "$work/synth-$model") <(tree_sums "$work/synth-$model-b"); then
      echo "cross_arch: the two binaries' synth checkpoints ($model) differ:" >&2
      diff <(tree_sums "$work/synth-$model") <(tree_sums "$work/synth-$model-b") >&2 || true
      exit 1
    fi
  fi
done
"$kev_a" pin --quiet --model kev-4b --base "$work/synth-tiny/base" --checkpoint "$work/synth-tiny/checkpoint" \
  --out "$work/recipe-tiny.json"
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
# A prefix and rows that cross the GDN chunk (64) and the GEMM tiles (odd lengths, one token),
# and two rows at far positions (RoPE angles up to 2^20, where the sin/cos reduction matters).
rows = [{"ids": ids(n)} for n in (1, 5, 67, 130)]
rows.append({"ids": ids(9), "positions": list(range(262135, 262144))})
rows.append({"ids": ids(3), "positions": [1000000, 1048575, 1048576]})
json.dump({"prefix": ids(70), "rows": rows}, open(f"{work}/forward.json", "w"))
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

# run_all NAME KEV ISA: every output of one binary at one level, for every model, under
# $work/NAME. The tiny model goes through export, forward and score; the wide one (4 layers, no
# Kev member's depth, so no recipe) through forward on its base weights.
run_all() {
  local name=$1 kev=$2 isa=$3 model out weights p bf16_env=()
  [ "$isa" = avx512 ] && bf16_env=(KEV_GEMM_ISA=avx2)
  for model in "${models[@]}"; do
    out=$work/$name/$model weights=$work/synth-$model/base
    mkdir -p "$out"
    if [ "$model" = tiny ]; then
      weights=$out/bundle
      KEV_ISA="$isa" "$kev" export --quiet --recipe "$work/recipe-tiny.json" \
        --base "$work/synth-tiny/base" --checkpoint "$work/synth-tiny/checkpoint" --out "$weights"
      for p in fp32 int8; do
        KEV_ISA="$isa" "$kev" score --bundle "$weights" --precision "$p" --decimals -1 \
          --state-dir "$out/states-$p" <"$work/score.json" | drop_latency >"$out/score-$p.json"
      done
      # A quantized bundle (kev quantize's default format, q4z with its q8 rows) and its answers.
      KEV_ISA="$isa" "$kev" quantize --quiet --bundle "$weights" --out "$out/bundle-q4" >/dev/null
      KEV_ISA="$isa" "$kev" score --bundle "$out/bundle-q4" --precision int8 --decimals -1 \
        <"$work/score.json" | drop_latency >"$out/score-q4.json"
      KEV_ISA="$isa" "$kev" score --bundle "$out/bundle-q4" --precision w8a8 --decimals -1 \
        <"$work/score.json" | drop_latency >"$out/score-q4-w8a8.json"
      # One with all five stored kinds (q8, q5, q5z, q4, q4z) and its answers.
      KEV_ISA="$isa" "$kev" quantize --quiet --bundle "$weights" --out "$out/bundle-q5" \
        --q8 gdn_q,gdn_k --q5 attn_q,attn_k,attn_v --q5z attn_o,mlp_down \
        --q4 gdn_v,gdn_z,gdn_out --q4z mlp_gate,mlp_up >/dev/null
      KEV_ISA="$isa" "$kev" score --bundle "$out/bundle-q5" --precision int8 --decimals -1 \
        <"$work/score.json" | drop_latency >"$out/score-q5.json"
    fi
    for p in fp32 int8 w8a8; do
      KEV_ISA="$isa" "$kev" forward --quiet --bundle "$weights" --input "$work/forward.json" \
        --output "$out/forward-$p.safetensors" --with-prefix --precision "$p"
    done
    KEV_ISA="$isa" "$kev" forward --quiet --bundle "$weights" --gdn chunked \
      --input "$work/forward.json" --output "$out/forward-chunked.safetensors" --with-prefix
    env KEV_ISA="$isa" "${bf16_env[@]}" "$kev" forward --quiet --bundle "$weights" \
      --input "$work/forward.json" --output "$out/forward-bf16.safetensors" --precision bf16
  done
  tree_sums "$work/$name" >"$work/$name.sums"
}

levels() {  # the supported levels of a binary's architecture, from `kev cpu`
  "$1" cpu | python3 -c 'import json,sys; print(" ".join(k for k, v in json.load(sys.stdin)["supported"].items() if v and k in ("portable", "avx2", "avx512", "neon")))'
}

# differences REF OTHER: where two runs' forward and score outputs differ (a diagnosis printed
# when their bytes do not match): per file, the largest difference and how many values match.
differences() {
  python3 - "$1" "$2" <<'PY'
import array, json, os, struct, sys
a, b = sys.argv[1:3]
def tensors(path):
    raw = open(path, "rb").read()
    n = struct.unpack("<Q", raw[:8])[0]
    head = json.loads(raw[8:8 + n])
    return {k: array.array("f", raw[8 + n + v["data_offsets"][0]:8 + n + v["data_offsets"][1]])
            for k, v in head.items() if k != "__metadata__"}
def leaves(d, pre=""):
    if isinstance(d, dict):
        for k, v in d.items():
            yield from leaves(v, f"{pre}/{k}")
    else:
        yield pre, d
for f in sorted(os.listdir(a)):
    if f.endswith(".safetensors"):
        ta, tb = tensors(f"{a}/{f}"), tensors(f"{b}/{f}")
        pairs = [(x, y) for k in ta for x, y in zip(ta[k], tb.get(k, []))]
    elif f.endswith(".json"):
        la, lb = dict(leaves(json.load(open(f"{a}/{f}")))), dict(leaves(json.load(open(f"{b}/{f}"))))
        pairs = [(la[k], lb.get(k)) for k in la if isinstance(la[k], float)]
    else:
        continue
    worst = max((abs(x - y) for x, y in pairs if isinstance(y, float)), default=0.0)
    same = sum(x == y for x, y in pairs)
    print(f"cross_arch: {f}: max difference {worst:.3g}, {same}/{len(pairs)} values identical",
          file=sys.stderr)
PY
}

# report NAME REF: says where run NAME's bytes differ from run REF's, model by model.
report() {
  local model
  echo "cross_arch: $1 differs from $2:" >&2
  diff "$work/$2.sums" "$work/$1.sums" >&2 || true
  for model in "${models[@]}"; do differences "$work/$2/$model" "$work/$1/$model"; done
}

status=0
first_a=""
for side in "${binaries[@]}"; do
  kev=$kev_a
  [ "$side" = b ] && kev=$kev_b
  ref=""
  for isa in $(levels "$kev"); do
    name="$side-$isa"
    echo "cross_arch: $name ($("$kev" cpu | python3 -c 'import json,sys; print(json.load(sys.stdin)["arch"])'))" >&2
    run_all "$name" "$kev" "$isa"
    if [ -z "$ref" ]; then
      ref=$name
      # The outputs must be real: a bundle with its manifest, hidden states, answers.
      test -s "$work/$ref/tiny/bundle/kev_export.json" && test -s "$work/$ref/tiny/forward-fp32.safetensors"
      grep -q '"next_step"' "$work/$ref/tiny/score-fp32.json"
      compgen -G "$work/$ref/tiny/states-int8/*/*.kvs" >/dev/null
      grep -q '"q4"' "$work/$ref/tiny/bundle-q4/kev_export.json" && grep -q '"next_step"' "$work/$ref/tiny/score-q4.json"
    elif ! cmp -s "$work/$ref.sums" "$work/$name.sums"; then
      # Within one binary every level gives the same bytes, everything included.
      report "$name" "$ref"
      status=1
    fi
  done
  if [ "$side" = a ]; then
    first_a=$ref
  elif ! cmp -s "$work/$first_a.sums" "$work/$ref.sums"; then
    # Across the two binaries: every output byte for byte.
    report "$ref" "$first_a"
    status=1
  fi
done
if [ "$status" = 0 ]; then
  what="every level of $(basename "$kev_a")" checked="bundles, quantized bundles"
  [ -z "$kev_b" ] || what="every level of both binaries" checked="synth checkpoints, bundles, quantized bundles"
  echo "cross_arch: $what gives identical bytes (models: ${models[*]}): $checked, hidden states (fp32 both GDN forms, int8, w8a8, bf16), scores (the default q4z bundle included, int8 and w8a8; the q8+q5+q5z+q4+q4z bundle in int8) and saved state files" >&2
fi
exit "$status"
