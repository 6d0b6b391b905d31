"""Precision modes (`--precision fp32|bf16|int8|w8a8`): parity distribution and speed.

Usage:
  /usr/bin/python3 bench/precision_bench.py parity KEV WORK --shape 0.8b|4b|tiny [--questions 500]
      [--reference N] [--temperature T] [--layers L]
  /usr/bin/python3 bench/precision_bench.py speed KEV MODEL_DIR [--tokens 512] [--threads 2]

parity: synthesizes (once, under WORK) a checkpoint with the shape's per-layer dimensions and
--layers layers (32 by default, pinned as Kev-4B; `--shape 0.8b --layers 24` is pinned as
Kev-0.8B, the real depth), pins and exports it, scores >= --questions generated questions
in every mode with `kev score`, and prints per mode the distribution of max |dp| per question
against kev fp32 (and against the float64 torch reference on the first --reference questions'
requests; --widen-on-use at Kev-4B dimensions), the reference's top-2 margin distribution and
the argmax flips (with margins).
--bf16-classes SPEC ... (both commands): also the bf16 mode with KEV_BF16_CLASSES=SPEC, reported
as mode "bf16[SPEC]" (e.g. `all`: every projection in bf16).
speed: per mode, a `kev forward` of --tokens tokens minus a 1-token run (load and, for int8,
quantization cancel), each under /usr/bin/time -v (peak RSS), alternating modes, --rounds
rounds: the fastest N-token run less the fastest 1-token run.
"""
import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "tests", "oracle"))
sys.path.insert(0, os.path.join(HERE, "..", "tests", "pylib"))
import kevtest  # noqa: E402
import precision_parity as pp  # noqa: E402

MODES = ("fp32", "bf16", "int8", "w8a8")


def mode_run(mode):
    """(precision, extra environment) of a reported mode: "bf16[SPEC]" is bf16 with
    KEV_BF16_CLASSES=SPEC, "int8-all" int8 with KEV_INT8_CLASSES=all."""
    if mode.startswith("bf16[") and mode.endswith("]"):
        return "bf16", {"KEV_BF16_CLASSES": mode[5:-1]}
    if mode == "int8-all":  # every projection quantized (the pre-selection int8; model.h)
        return "int8", {"KEV_INT8_CLASSES": "all"}
    return mode, {}


def score_mode(bundle, reqs, mode):
    precision, extra = mode_run(mode)
    saved = {k: os.environ.get(k) for k in extra}
    os.environ.update(extra)
    try:
        return pp.score(bundle, reqs, precision)
    finally:
        for k, v in saved.items():
            if v is None:
                del os.environ[k]
            else:
                os.environ[k] = v


def parity(a):
    kevtest.KEV_BIN = os.path.abspath(a.kev)
    work = os.path.abspath(a.work)
    bundle = os.path.join(work, "bundle")
    if not os.path.exists(bundle):
        os.makedirs(work, exist_ok=True)
        extra = ["--shape", a.shape, "--layers", str(a.layers), "--temperature", str(a.temperature),
                 "--seed", str(a.synth_seed), *a.synth_arg]
        if os.path.exists(kevtest.QWEN3_TOKENIZER):
            extra += ["--tokenizer", kevtest.QWEN3_TOKENIZER]
        t0 = time.time()
        # A 24-layer 0.8b shape is Kev-0.8B's inventory (186 targets); 32 layers are Kev-4B's.
        model = "kev-0.8b" if a.shape == "0.8b" and a.layers == 24 else "kev-4b"
        pin = ("--model", model)
        if model == "kev-0.8b":  # its released revisions are not pinned: name synthetic ones
            pin += ("--base-revision", "0" * 40, "--checkpoint-revision", "0" * 40)
        kevtest.synth_bundle(work, *extra, pin_args=pin)
        print(f"synth + pin + export: {time.time() - t0:.0f} s", flush=True)
    reqs = pp.requests(a.questions, seed=a.seed)
    got, secs = load_saved(a)
    modes = list(a.modes) + [f"bf16[{spec}]" for spec in a.bf16_classes]
    for mode in modes:
        if mode in got:
            print(f"{mode}: {len(got[mode])} questions read from {a.save}", flush=True)
            continue
        t0 = time.time()
        got[mode] = score_mode(bundle, reqs, mode)
        secs[mode] = time.time() - t0
        print(f"{mode}: {len(got[mode])} questions scored in {secs[mode]:.1f} s", flush=True)
        if a.save:  # after every mode: a long run stopped part-way keeps what it scored
            with open(a.save + ".tmp", "w") as f:
                json.dump({"key": saved_key(a), "probs": got, "score_s": secs}, f)
            os.replace(a.save + ".tmp", a.save)
    result = {"shape": a.shape, "layers": a.layers, "temperature": a.temperature, "modes": {},
              "score_s": secs}
    for mode in [m for m in modes if m != "fp32"]:
        c = pp.compare(got[mode], got["fp32"])
        result["modes"][mode] = {"vs_fp32": pp.summary(c), "within_budget_vs_fp32": pp.within_budget(c)}
        # The same answers at softer head temperatures (p ~ softmax(l / T): log p rescales exactly).
        for t in a.soften:
            f = a.temperature / t
            c = pp.compare(pp.rescale(got[mode], f), pp.rescale(got["fp32"], f))
            result["modes"][mode][f"vs_fp32_T{t}"] = pp.summary(c)
            result["modes"][mode][f"within_budget_vs_fp32_T{t}"] = pp.within_budget(c)
    if a.reference:
        from score_reference import ScoringReference
        sub, n = [], 0
        for r in reqs:
            if n >= a.reference:
                break
            sub.append(r)
            n += len(r["questions"])
        t0 = time.time()
        ref = ScoringReference(os.path.join(work, "synth"), widen_on_use=a.widen_on_use)
        f64 = pp.reference_probs(ref.score(sub))
        print(f"float64 reference: {len(f64)} questions in {time.time() - t0:.0f} s", flush=True)
        for mode in modes:
            c = pp.compare(got[mode][:len(f64)], f64)
            result["modes"].setdefault(mode, {})["vs_float64"] = pp.summary(c)
            result["modes"][mode]["within_budget_vs_float64"] = pp.within_budget(c)
    print(json.dumps(result, indent=1))


def saved_key(a):
    """What the saved probabilities depend on (the bundle's own options are fixed by WORK)."""
    return {"work": os.path.abspath(a.work), "questions": a.questions, "seed": a.seed,
            "int8_classes": os.environ.get("KEV_INT8_CLASSES"),
            "bf16_classes": os.environ.get("KEV_BF16_CLASSES"), "bf16_kernel": os.environ.get("KEV_BF16_KERNEL"),
            "emulate": os.environ.get("KEV_AVX512_EMULATE")}


def load_saved(a):
    """The modes an earlier run with the same --save, WORK and questions already scored."""
    if not a.save or not os.path.exists(a.save):
        return {}, {}
    with open(a.save) as f:
        saved = json.load(f)
    if not isinstance(saved, dict) or saved.get("key") != saved_key(a):
        sys.exit(f"{a.save} holds another run's probabilities: remove it or pick another --save")
    return saved["probs"], saved.get("score_s", {})


def timed_forward(kev, model, ids, mode, threads, tmp):
    mode, extra = mode_run(mode)
    env = {**os.environ, **extra}
    inp = os.path.join(tmp, "in.json")
    with open(inp, "w") as f:
        json.dump({"rows": [{"ids": ids}]}, f)
    t0 = time.time()
    proc = subprocess.run(["/usr/bin/time", "-v", kev, "forward", "--bundle", model, "--input", inp,
                           "--output", os.path.join(tmp, "out.safetensors"), "--precision", mode,
                           "--threads", str(threads)], capture_output=True, text=True, check=True, env=env)
    wall = time.time() - t0
    rss = int(re.search(r"Maximum resident set size \(kbytes\): (\d+)", proc.stderr).group(1))
    cpu = sum(float(re.search(rf"{k} time \(seconds\): ([\d.]+)", proc.stderr).group(1)) for k in ("User", "System"))
    return wall, cpu, rss


def speed(a):
    ids = [(i * 7919) % 100000 + 10 for i in range(a.tokens)]
    modes = tuple(a.modes) + (("int8-all",) if a.int8_all else ()) + tuple(f"bf16[{c}]" for c in a.bf16_classes)
    runs = {m: {"w1": [], "c1": [], "wn": [], "cn": [], "rss_kib": 0} for m in modes}
    with tempfile.TemporaryDirectory(prefix="prec-speed-") as tmp:
        for _ in range(a.rounds):
            for mode in modes:
                w1, c1, _ = timed_forward(a.kev, a.model, ids[:1], mode, a.threads, tmp)
                wn, cn, rss = timed_forward(a.kev, a.model, ids, mode, a.threads, tmp)
                r = runs[mode]
                for key, value in (("w1", w1), ("c1", c1), ("wn", wn), ("cn", cn)):
                    r[key].append(value)
                r["rss_kib"] = max(r["rss_kib"], rss)
                print(mode, f"wall {wn - w1:.2f} s cpu {cn - c1:.2f} s rss {rss} KiB", flush=True)
    # The fastest N-token run less the fastest 1-token run: a load that ran slow (a fast mode's
    # load varies by tenths of a second) never shortens the prefill, as pairing within a round
    # could when the 1-token run's load was the slow one.
    best = {m: {"prefill_s": min(r["wn"]) - min(r["w1"]), "prefill_cpu_s": min(r["cn"]) - min(r["c1"]),
                "rss_kib": r["rss_kib"]} for m, r in runs.items()}
    cpu = subprocess.run([a.kev, "cpu"], capture_output=True, text=True).stdout.strip()
    for m in modes:
        best[m]["tok_s"] = a.tokens / best[m]["prefill_s"]
        best[m]["tok_per_cpu_s"] = a.tokens / best[m]["prefill_cpu_s"]
        if "fp32" in best:
            best[m]["speedup_vs_fp32_cpu"] = best["fp32"]["prefill_cpu_s"] / best[m]["prefill_cpu_s"]
    print(json.dumps({"model": a.model, "tokens": a.tokens, "threads": a.threads, "kev_cpu": cpu, "modes": best},
                     indent=1))


def main():
    ap = argparse.ArgumentParser()
    sub = ap.add_subparsers(dest="cmd", required=True)
    p = sub.add_parser("parity")
    p.add_argument("kev")
    p.add_argument("work")
    p.add_argument("--shape", default="0.8b")
    p.add_argument("--layers", type=int, default=32)
    p.add_argument("--questions", type=int, default=500)
    p.add_argument("--reference", type=int, default=0, help="questions also compared with float64")
    p.add_argument("--widen-on-use", action="store_true",
                   help="the float64 reference keeps the weights in BF16 and widens each at use (exact; "
                   "for Kev-4B dimensions, whose float64 copy would not fit in memory)")
    p.add_argument("--temperature", type=float, default=0.5)
    p.add_argument("--seed", type=int, default=7, help="seed of the generated questions")
    p.add_argument("--synth-seed", type=int, default=5, help="seed of the synthetic weights")
    p.add_argument("--synth-arg", action="append", default=[],
                   help="extra `kev synth` argument (repeat), e.g. --synth-arg=--linear-key-dim=32")
    p.add_argument("--save", help="write every mode's probabilities here (JSON), after each mode; "
                   "a mode already in the file (same WORK and questions) is read, not scored again")
    p.add_argument("--modes", nargs="+", default=list(MODES), choices=MODES,
                   help="modes to score (fp32 first: the others are compared with it)")
    p.add_argument("--soften", type=float, nargs="*", default=[],
                   help="also report at these (higher) head temperatures, by rescaling log p")
    s = sub.add_parser("speed")
    s.add_argument("kev")
    s.add_argument("model")
    s.add_argument("--tokens", type=int, default=512)
    s.add_argument("--threads", type=int, default=2)
    s.add_argument("--rounds", type=int, default=3)
    s.add_argument("--int8-all", action="store_true",
                   help="also time int8 with every projection quantized (KEV_INT8_CLASSES=all)")
    s.add_argument("--modes", nargs="+", default=list(MODES), choices=MODES)
    for q in (p, s):
        q.add_argument("--bf16-classes", nargs="+", default=[], metavar="SPEC",
                       help="also the bf16 mode with KEV_BF16_CLASSES=SPEC (mode \"bf16[SPEC]\")")
    a = ap.parse_args()
    parity(a) if a.cmd == "parity" else speed(a)


if __name__ == "__main__":
    main()
