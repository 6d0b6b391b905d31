"""Decision agreement of quantized bundles (`kev quantize`) with the exact bundle.

Usage:
  /usr/bin/python3 bench/quant_agreement.py KEV WORK [--shape 0.8b --layers 24 --temperature 2.35]
      [--questions 2000] [--variant NAME=--q8,SPEC,--q4,SPEC ...] [--variants-only]
      [--peer Q8_0,Q4_K_M] [--json OUT]

Synthesizes (once, under WORK) a checkpoint of the shape's dimensions, pins and exports it, makes
the q8, q4z (the default format) and q4 bundles with `kev quantize` (and one per --variant: kev quantize's arguments
as shell words, for selection studies), scores the same >= --questions generated questions
(tests/oracle/precision_parity.py) with the exact bundle in fp32 and with every quantized bundle
(and the exact bundle in int8, today's load-time mode) through `kev score`, and prints per bundle:
decision agreement (argmax equal), max and mean |dp| over every option probability, and the
flips by the exact answer's top-2 margin. Probabilities are kept in WORK/probs.json, so a rerun
only scores what is missing.

With --peer TYPES, the same figures for llama.cpp's own quantized weights: the exact bundle is
converted to GGUF and quantized by llama.cpp (bench/llama_peer.py's pinned build, made on first use),
and each type's values are put back into a bundle that kev scores in fp32
(bench/llama_peer/dequantize.py: it leaves out llama.cpp's 8-bit activations, so the peer's real
decisions move at least this much).

With --speed N (N tokens), it also times per bundle a `kev forward` of N tokens minus a 1-token run
(bench/precision_bench.py's measure: load and quantization cancel; peak RSS of the N-token run),
alternating bundles, best of --rounds; --speed-only skips the agreement.
"""
import argparse
import json
import shlex
import os
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "tests", "oracle"))
sys.path.insert(0, os.path.join(HERE, "..", "tests", "pylib"))
import kevtest  # noqa: E402
import precision_parity as pp  # noqa: E402
from precision_bench import timed_forward  # noqa: E402

MARGIN_EDGES = (0.005, 0.01, 0.02, 0.05, 0.1)


def pin_args(a):
    model = a.model or ("kev-0.8b" if a.shape == "0.8b" and a.layers == 24 else "kev-4b")
    pin = ("--model", model)
    if model != "kev-4b":  # their released revisions are not pinned: name synthetic ones
        pin += ("--base-revision", "0" * 40, "--checkpoint-revision", "0" * 40)
    return pin


def ensure_bundle(a, work):
    bundle = os.path.join(work, "bundle")
    if not os.path.exists(bundle):
        os.makedirs(work, exist_ok=True)
        extra = ["--shape", a.shape, "--layers", str(a.layers), "--temperature", str(a.temperature),
                 "--seed", str(a.synth_seed)]
        kevtest.synth_bundle(work, *extra, pin_args=pin_args(a))
    return bundle


def peer_bundles(kev, bundle, work, a):
    """{"llama.cpp TYPE": (bundle of llama.cpp's TYPE weights, "fp32")} (bench/llama_peer/dequantize.py),
    {"llama.cpp TYPE": its GGUF's bytes}"""
    import llama_peer
    sys.path.insert(0, os.path.join(HERE, "llama_peer"))
    import dequantize
    types = a.peer.split(",")
    src, bins = llama_peer.llama_cpp(a.llama_cache, llama_peer.LLAMA_NPM_VERSION)
    paths = llama_peer.ggufs(src, bins, bundle, work, "peer", types)
    out, sizes = {}, {}
    for t in types:
        b = dequantize.peer_bundle(kev, src, paths[t], bundle, os.path.join(work, "synth"), pin_args(a),
                                   os.path.join(work, "peer-" + t))
        out["llama.cpp " + t] = (b, "fp32")
        sizes["llama.cpp " + t] = os.path.getsize(paths[t])
    return out, sizes


def quantized(kev, bundle, work, name, args):
    out = os.path.join(work, name)
    if not os.path.exists(out):
        t0 = time.time()
        subprocess.run([kev, "quantize", "--bundle", bundle, "--out", out, "--quiet", *args], check=True,
                       stdout=subprocess.DEVNULL)
        print(f"{name}: quantized in {time.time() - t0:.1f} s", flush=True)
    return out


def agreement(probs, ref):
    c = pp.compare(probs, ref)
    n = c["questions"]
    dp = c["dp"]
    buckets, lo = {}, 0.0
    for hi in MARGIN_EDGES + (float("inf"),):
        label = f"[{lo}, {hi})" if hi != float("inf") else f">= {lo}"
        buckets[label] = {"questions": sum(1 for m in c["margins"] if lo <= m < hi),
                          "flips": sum(1 for m in c["flips"] if lo <= m < hi)}
        lo = hi
    return {"questions": n, "agreement": 1 - len(c["flips"]) / n, "flips": len(c["flips"]),
            "dp_max": max(dp), "dp_mean": sum(dp) / n, "dp_p99": pp._pct(dp, 0.99),
            "flip_margin_max": max(c["flips"]) if c["flips"] else None,
            "flips_by_margin": buckets}


def speed(kev, runs, a):
    import tempfile
    ids = [(i * 7919) % 100000 + 10 for i in range(a.speed)]
    best = {}
    with tempfile.TemporaryDirectory(prefix="quant-speed-") as tmp:
        for _ in range(a.rounds):
            for name, (b, precision) in runs.items():
                w1, c1, _ = timed_forward(kev, b, ids[:1], precision, a.threads, tmp)
                wn, cn, rss = timed_forward(kev, b, ids, precision, a.threads, tmp)
                r = best.setdefault(name, {"prefill_s": 1e9, "prefill_cpu_s": 1e9, "rss_mib": 0})
                r["prefill_s"] = min(r["prefill_s"], wn - w1)
                r["prefill_cpu_s"] = min(r["prefill_cpu_s"], cn - c1)
                r["rss_mib"] = max(r["rss_mib"], rss // 1024)
                print(f"{name}: wall {wn - w1:.2f} s cpu {cn - c1:.2f} s rss {rss // 1024} MiB", flush=True)
    for r in best.values():
        r["tok_s"] = round(a.speed / r["prefill_s"], 1)
    return {"tokens": a.speed, "threads": a.threads, "kev_cpu": kev_cpu(kev), "bundles": best}


def kev_cpu(kev):
    return json.loads(subprocess.run([kev, "cpu"], capture_output=True, text=True, check=True).stdout)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("kev")
    ap.add_argument("work")
    ap.add_argument("--shape", default="0.8b")
    ap.add_argument("--layers", type=int, default=24)
    ap.add_argument("--temperature", type=float, default=2.35)
    ap.add_argument("--questions", type=int, default=2000)
    ap.add_argument("--seed", type=int, default=7, help="seed of the generated questions")
    ap.add_argument("--synth-seed", type=int, default=5)
    ap.add_argument("--model", help="the Kev member to pin as (default: kev-0.8b at 0.8B dimensions and "
                    "24 layers, else kev-4b); e.g. kev-27b-v1-lora for 64 layers")
    ap.add_argument("--variant", action="append", default=[],
                    help="NAME=ARGS: another bundle made by kev quantize ARGS (shell words)")
    ap.add_argument("--no-int8", action="store_true", help="skip the exact bundle in int8 mode")
    ap.add_argument("--variants-only", action="store_true",
                    help="skip the q8, q4z and q4 format bundles: only the exact bundle and the --variant ones")
    ap.add_argument("--peer", help="also llama.cpp's weights of these GGUF types (e.g. Q8_0,Q4_K_M), "
                    "scored in fp32 (bench/llama_peer/dequantize.py)")
    ap.add_argument("--llama-cache", default=os.path.expanduser("~/.cache/kev-bench"),
                    help="where bench/llama_peer.py keeps llama.cpp")
    ap.add_argument("--json", help="also write the result here")
    ap.add_argument("--speed", type=int, default=0, help="also time a prefill of this many tokens")
    ap.add_argument("--speed-only", action="store_true")
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--threads", type=int, default=2)
    a = ap.parse_args()
    kev = os.path.abspath(a.kev)
    kevtest.KEV_BIN = kev
    work = os.path.abspath(a.work)
    bundle = ensure_bundle(a, work)
    runs = {"fp32": (bundle, "fp32")}
    if not a.no_int8:
        runs["int8 (load-time)"] = (bundle, "int8")
    if not a.variants_only:
        runs["q8"] = (quantized(kev, bundle, work, "q8", ["--format", "q8"]), "int8")
        runs["q4z"] = (quantized(kev, bundle, work, "q4z", ["--format", "q4z"]), "int8")
        runs["q4"] = (quantized(kev, bundle, work, "q4", ["--format", "q4"]), "int8")
    for v in a.variant:
        name, _, args = v.partition("=")
        runs[name] = (quantized(kev, bundle, work, "variant-" + name, shlex.split(args)), "int8")
    gguf_bytes = {}
    if a.peer:
        peers, gguf_bytes = peer_bundles(kev, bundle, work, a)
        runs.update(peers)
    if a.speed:
        speeds = speed(kev, runs, a)
        if a.speed_only:
            print(json.dumps(speeds, indent=1))
            if a.json:
                with open(a.json, "w") as f:
                    f.write(json.dumps(speeds, indent=1) + "\n")
            return
    reqs = pp.requests(a.questions, seed=a.seed)
    store = os.path.join(work, "probs.json")
    saved = json.load(open(store)) if os.path.exists(store) else {}
    key = f"{a.questions}/{a.seed}"
    saved = saved if saved.get("key") == key else {"key": key, "probs": {}, "seconds": {}}
    for name, (b, precision) in runs.items():
        if name in saved["probs"]:
            continue
        t0 = time.time()
        saved["probs"][name] = pp.score(b, reqs, precision)
        saved["seconds"][name] = time.time() - t0
        print(f"{name}: {len(saved['probs'][name])} questions in {saved['seconds'][name]:.0f} s", flush=True)
        with open(store + ".tmp", "w") as f:
            json.dump(saved, f)
        os.replace(store + ".tmp", store)
    ref = saved["probs"]["fp32"]
    sizes = {}
    for name, (b, _) in runs.items():
        sizes[name] = sum(os.path.getsize(os.path.join(b, f)) for f in os.listdir(b) if "safetensors" in f and f != "head.safetensors")
    result = {"shape": a.shape, "layers": a.layers, "temperature": a.temperature, "questions": len(ref),
              "kev_cpu": kev_cpu(kev), "bundles": {}}
    for name in runs:
        if name == "fp32":
            continue
        r = agreement(saved["probs"][name], ref)
        r["weight_bytes"] = sizes[name]
        if name in gguf_bytes:
            r["gguf_bytes"] = gguf_bytes[name]  # the file llama.cpp would serve (its weight_bytes: BF16)
        r["score_s"] = round(saved["seconds"].get(name, 0), 1)
        result["bundles"][name] = r
    result["exact_weight_bytes"] = sizes["fp32"]
    text = json.dumps(result, indent=1)
    print(text)
    if a.json:
        with open(a.json, "w") as f:
            f.write(text + "\n")


if __name__ == "__main__":
    main()
