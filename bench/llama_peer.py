"""Peer benchmark: kev against llama.cpp on the same CPU, the same synthetic weights, states of
512 to 65,536 tokens, in one run. Results and the exact command: docs/performance.md
("Peer benchmark: llama.cpp").

    /usr/bin/python3 bench/llama_peer.py [--kev build/release/kev] [--dims 0.8b,4b]
        [--tokens 512,8192] [--precisions fp32,bf16,int8,w8a8,q8,q4] [--threads 2] [--rounds 3]
        [--work /tmp/kev-peer] [--isa avx2] [--json out.json]

What it does, all at bench time and outside the repository:
1. llama.cpp at a pinned version: the npm package node-llama-cpp@LLAMA_NPM_VERSION ships the
   llama.cpp source as a git bundle (llama/gitRelease.bundle). `npm pack` it, clone the bundle
   and build llama-bench + llama-quantize (CPU only, GGML_NATIVE, OpenMP; ~11 min on 2 idle
   cores) into CACHE/llama.cpp-<version> (CACHE = ~/.cache/kev-bench). Reused when present.
   Nothing of llama.cpp is committed here. With --isa L both engines run level L below the
   CPU's best: kev under KEV_ISA=L, llama.cpp built for L without GGML_NATIVE (build-L/).
2. For each dims (0.8b, 4b): `kev synth --shape D` -> `kev pin --model M` -> `kev export`: the
   kev bundle. The bundle's weights (base + merged LoRA, BF16) are converted to GGUF with
   llama.cpp's own convert_hf_to_gguf.py (bench/llama_peer/convert.py runs it without
   `transformers`; `--no-nextn`: the synthetic checkpoint's partial mtp.* block is skipped) and
   quantized with llama-quantize to the types the pairings need: F32 (at --f32-at dims, 0.8b
   by default: 17 GB at 4B dims), BF16, and Q8_0 when kev has an int8 mode.
3. Rounds (median of --rounds): in each round, per dims, the runs alternate kev and llama.cpp:
   - kev: `kev forward --threads T` on an N-token state (N - 1 prefix tokens and a 1-token row:
     only the last position is read out, as a state's questions read it; so the last layer skips
     the prefix rows' outputs, as `kev serve` does when it prefills a state, while llama.cpp's
     Qwen3.5 graph computes every row's last layer and selects the read row after the final
     norm) and on a 1-token row
     (both cold processes, after an untimed 1-token run that brings the bundle into the page
     cache; t1 the faster of two 1-token runs, since a fast mode's load varies); prefill
     tokens/s = (N - 1) / (tN - t1), i.e. the load and the first token cancel
     (docs/performance.md, "Peer benchmark: llama.cpp").
   - llama.cpp: `llama-bench -p N -n 0 -fa F -t T -r 1 -o json` (its prompt-processing tokens/s;
     F from --flash-attn, on by default: its tiled CPU attention), with OMP_WAIT_POLICY from
     --llama-omp-wait-policy (llama.cpp's default unless told).
   Every run is under /usr/bin/time -v: peak RSS per configuration (max over rounds).
4. Ratios per precision pairing: kev fp32 vs llama.cpp F32 and BF16; kev bf16 vs BF16 and kev
   int8 and w8a8 vs Q8_0 when `kev forward --help` offers --precision; kev's quantized bundles (`kev
   quantize`, q8 and q4, run in int8 mode; asked with --precisions q8,q4) vs Q8_0 and Q4_K_M,
   both made from the same BF16 weights (PAIRINGS below: extend there).

Needs: cmake, ninja or make, g++, git, npm (registry access for the one `npm pack`), Debian's
python3-torch, python3-numpy and python3-tqdm (the converter's imports) and GNU time: scripts/setup.sh
installs them.
"""
import argparse
import json
import os
import random
import re
import shutil
import statistics
import subprocess
import sys
import tarfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
LLAMA_NPM_VERSION = "3.22.1"  # node-llama-cpp; its llama/llama.cpp.info.json says tag "v0.5.0"
LLAMA_COMMIT = "de3ff815ea7d559ee917f063901b8986f038abc6"  # HEAD of that version's gitRelease.bundle
# kev precision -> the llama.cpp types it is compared with. kev precisions other than fp32 are
# used only when `kev forward` has --precision.
PAIRINGS = {"fp32": ["F32", "BF16"], "bf16": ["BF16"], "int8": ["Q8_0"], "w8a8": ["Q8_0"],
            "q8": ["Q8_0"], "q4": ["Q4_K_M"]}
# kev's quantized bundles (`kev quantize --format F`), run with --precision int8; the weights
# llama.cpp gets are its own quantization of the same BF16 weights.
QUANTIZED = ("q8", "q4")
TYPE_ORDER = ["F32", "BF16", "Q8_0", "Q4_K_M"]
MODELS = {"0.8b": "kev-0.8b", "4b": "kev-4b"}
REVISION = "0" * 40  # recorded for the synthetic checkpoints of members whose recipe has none


def log(msg):
    print(f"[llama_peer {time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def run(cmd, **kw):
    log("$ " + " ".join(map(str, cmd)))
    return subprocess.run([str(c) for c in cmd], check=True, **kw)


# ---------------------------------------------------------------- llama.cpp

# --isa: the llama.cpp build flags of each level (none: GGML_NATIVE, the CPU's own best).
LLAMA_ISA_FLAGS = {
    "avx2": ["-DGGML_NATIVE=OFF", "-DGGML_AVX=ON", "-DGGML_AVX2=ON", "-DGGML_FMA=ON", "-DGGML_F16C=ON",
             "-DGGML_BMI2=ON", "-DGGML_AVX_VNNI=OFF", "-DGGML_AVX512=OFF", "-DGGML_AVX512_VBMI=OFF",
             "-DGGML_AVX512_VNNI=OFF", "-DGGML_AVX512_BF16=OFF"],
}


def llama_cpp(cache, version, isa=None):
    src = os.path.join(cache, f"llama.cpp-{version}")
    build = os.path.join(src, "build" if isa is None else f"build-{isa}")
    bins = {n: os.path.join(build, "bin", n) for n in ("llama-bench", "llama-quantize")}
    if all(os.access(b, os.X_OK) for b in bins.values()):
        return src, bins
    if not os.path.isdir(os.path.join(src, ".git")):
        tmp = os.path.join(cache, f"npm-{version}")
        os.makedirs(tmp, exist_ok=True)
        run(["npm", "pack", f"node-llama-cpp@{version}", "--pack-destination", tmp], stdout=subprocess.DEVNULL)
        with tarfile.open(os.path.join(tmp, f"node-llama-cpp-{version}.tgz")) as t:
            for name in ("package/llama/gitRelease.bundle", "package/llama/llama.cpp.info.json"):
                t.extract(name, tmp)
        run(["git", "clone", "-q", os.path.join(tmp, "package/llama/gitRelease.bundle"), src])
    head = subprocess.run(["git", "-C", src, "rev-parse", "HEAD"], check=True, capture_output=True,
                          text=True).stdout.strip()
    if version == LLAMA_NPM_VERSION and head != LLAMA_COMMIT:
        sys.exit(f"llama.cpp source at {src} is {head}, not {LLAMA_COMMIT}; remove it and rerun")
    isa_flags = ["-DGGML_NATIVE=ON"] if isa is None else LLAMA_ISA_FLAGS[isa]
    run(["nice", "-n", "19", "cmake", "-S", src, "-B", build, "-DCMAKE_BUILD_TYPE=Release"] + isa_flags + [
         "-DLLAMA_CURL=OFF", "-DLLAMA_BUILD_TESTS=OFF", "-DLLAMA_BUILD_EXAMPLES=OFF",
         "-DLLAMA_BUILD_SERVER=OFF", "-DBUILD_SHARED_LIBS=OFF"] + (["-G", "Ninja"] if shutil.which("ninja") else []),
        stdout=subprocess.DEVNULL)
    run(["nice", "-n", "19", "cmake", "--build", build, "-j", str(os.cpu_count()),
         "--target", "llama-bench", "llama-quantize"], stdout=subprocess.DEVNULL)
    return src, bins


# ---------------------------------------------------------------- weights

def kev_bundle(kev, work, dims):
    d = os.path.join(work, dims)
    bundle = os.path.join(d, "bundle")
    if os.path.exists(os.path.join(bundle, "kev_export.json")):
        return bundle
    shutil.rmtree(d, ignore_errors=True)
    os.makedirs(d)
    synth = os.path.join(d, "synth")
    run([kev, "synth", "--out", synth, "--shape", dims, "--quiet"])
    model = MODELS[dims]
    rev = [] if model == "kev-4b" else ["--base-revision", REVISION, "--checkpoint-revision", REVISION]
    run([kev, "pin", "--model", model, "--base", synth + "/base", "--checkpoint", synth + "/checkpoint",
         "--out", os.path.join(d, "recipe.json")] + rev)
    run([kev, "export", "--recipe", os.path.join(d, "recipe.json"), "--base", synth + "/base",
         "--checkpoint", synth + "/checkpoint", "--out", bundle, "--quiet"])
    shutil.rmtree(os.path.join(synth, "base"))  # the bundle holds every base tensor (merged)
    return bundle


def quantized_bundle(kev, bundle, work, dims, fmt):
    out = os.path.join(work, dims, f"bundle-{fmt}")
    if not os.path.exists(os.path.join(out, "kev_export.json")):
        shutil.rmtree(out, ignore_errors=True)
        run([kev, "quantize", "--bundle", bundle, "--out", out, "--format", fmt, "--quiet"],
            stdout=subprocess.DEVNULL)
    return out


def ggufs(src, bins, bundle, work, dims, types):
    d = os.path.join(work, dims)
    out = {t: os.path.join(d, f"model-{t}.gguf") for t in types}
    if all(os.path.exists(p) for p in out.values()):
        return out
    # The converter reads every *.safetensors of a directory: give it the model files only
    # (the bundle's head.safetensors is the pointer head, not part of the backbone).
    view = os.path.join(d, "hf-view")
    os.makedirs(view, exist_ok=True)
    for name in os.listdir(bundle):
        if name != "head.safetensors" and (name.endswith((".json", ".safetensors"))) and name != "kev_export.json":
            if not os.path.exists(os.path.join(view, name)):
                os.symlink(os.path.join(bundle, name), os.path.join(view, name))
    first = "F32" if "F32" in types else "BF16"
    base = out.get(first) or os.path.join(d, f"model-{first}.gguf")
    if not os.path.exists(base):
        run([sys.executable, os.path.join(HERE, "llama_peer", "convert.py"), src, view, "--outfile", base,
             "--outtype", first.lower(), "--no-nextn"], stdout=subprocess.DEVNULL)
    for t in types:
        if not os.path.exists(out[t]):
            run([bins["llama-quantize"], base, out[t], t], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return out


# ---------------------------------------------------------------- timing

def timed(cmd):
    """(wall seconds, peak RSS KiB, stdout) of cmd under /usr/bin/time -v."""
    t0 = time.perf_counter()
    p = subprocess.run(["/usr/bin/time", "-v"] + [str(c) for c in cmd], capture_output=True, text=True)
    wall = time.perf_counter() - t0
    if p.returncode != 0:
        raise RuntimeError(f"{' '.join(map(str, cmd))} failed ({p.returncode}): {p.stderr[-2000:]}")
    rss = int(re.search(r"Maximum resident set size \(kbytes\): (\d+)", p.stderr).group(1))
    return wall, rss, p.stdout


def kev_inputs(work, lengths):
    """{N: path} of the N-token states (N - 1 prefix tokens, a 1-token row) and of 1 token."""
    rng = random.Random(1)
    ids = [rng.randrange(0, 240000) for _ in range(max(lengths))]
    paths = {1: os.path.join(work, "ids-1.json")}
    with open(paths[1], "w") as f:
        json.dump({"rows": [{"ids": ids[:1]}]}, f)
    for n in lengths:
        paths[n] = os.path.join(work, f"state-{n}.json")
        with open(paths[n], "w") as f:
            json.dump({"prefix": ids[:n - 1], "rows": [{"ids": ids[n - 1:n]}]}, f)
    return paths


def kev_run(kev, bundle, inputs, n_tokens, work, threads, precision):
    """kev: the command that starts kev (a list: with --isa, `env KEV_ISA=L kev`)."""
    extra = [] if precision == "fp32" else ["--precision", precision]
    out = os.path.join(work, "forward-out.safetensors")
    times, rss = {}, 0
    # An untimed 1-token run first brings the bundle into the page cache: the llama.cpp runs in
    # between can evict it (4B dims: 8 GB bundle + 13 GB of GGUF on a 23 GB machine), and a cold
    # read charged to the 1-token run would inflate the difference's tokens/s.
    timed(kev + ["forward", "--quiet", "--bundle", bundle, "--input", inputs[1], "--output", out, "--threads",
                 threads] + extra)
    # The 1-token run is timed twice and its faster run kept: a fast mode's load (bf16 packs its
    # weights, int8 quantizes them) varies by tenths of a second from process to process, which
    # at 512 tokens can exceed the prefill itself. Keeping the fastest load only ever lowers kev's
    # rate (the N-token run's own load is not the fastest one).
    for n in (1, 1, n_tokens):
        wall, r, _ = timed(kev + ["forward", "--quiet", "--bundle", bundle, "--input", inputs[n], "--output",
                                  out, "--threads", threads] + extra)
        times[n], rss = min(wall, times.get(n, wall)), max(rss, r)
    os.remove(out)
    return (n_tokens - 1) / (times[n_tokens] - times[1]), rss


def llama_run(bins, gguf, n_tokens, threads, flash_attn, omp_wait_policy, warmup=True):
    env = None if omp_wait_policy == "default" else ["env", f"OMP_WAIT_POLICY={omp_wait_policy}"]
    _, rss, out = timed((env or []) + [bins["llama-bench"], "-m", gguf, "-p", n_tokens, "-n", 0, "-fa", flash_attn,
                                       "-t", threads, "-r", 1, "-o", "json"] + ([] if warmup else ["--no-warmup"]))
    rows = [r for r in json.loads(out) if r.get("n_prompt") == n_tokens and r.get("n_gen") == 0]
    return rows[0]["avg_ts"], rss


# ---------------------------------------------------------------- main

def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--kev", default=os.path.join(ROOT, "build", "release", "kev"))
    ap.add_argument("--dims", default="0.8b,4b")
    ap.add_argument("--threads", type=int, default=os.cpu_count())
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--tokens", default="512", help="state lengths in tokens (comma list, each 2..65536)")
    ap.add_argument("--precisions", default="fp32,bf16,int8",
                    help="kev precisions to run (comma list); each brings its llama.cpp pairings")
    ap.add_argument("--flash-attn", default="1", choices=["0", "1"],
                    help="llama-bench -fa: 1 (default) runs llama.cpp's tiled CPU attention")
    ap.add_argument("--work", default="/tmp/kev-peer")
    ap.add_argument("--cache", default=os.path.expanduser("~/.cache/kev-bench"))
    ap.add_argument("--llama-version", default=LLAMA_NPM_VERSION)
    ap.add_argument("--f32-at", default="0.8b", help="dims at which llama.cpp F32 runs (comma list)")
    ap.add_argument("--llama-omp-wait-policy", default="default", choices=["default", "passive", "active"],
                    help="OMP_WAIT_POLICY for llama.cpp's OpenMP threads. llama.cpp's default (threads spin at "
                         "barriers) is right on an idle machine; on a shared, oversubscribed one spinning threads "
                         "lose their time slices and llama.cpp slows 3-5x, so use passive there (the output "
                         "records the choice)")
    ap.add_argument("--llama-warmup", default="on", choices=["on", "off"],
                    help="off: llama-bench --no-warmup. Its warmup processes the whole prompt once more, "
                         "doubling its time at long states; kev's runs have no warmup either (its rate "
                         "subtracts a 1-token run)")
    ap.add_argument("--isa", choices=sorted(LLAMA_ISA_FLAGS),
                    help="run both engines at this instruction-set level below the CPU's best: kev with "
                         "KEV_ISA, llama.cpp built without GGML_NATIVE for that level only (its own build "
                         "folder). Default: each engine's best for this CPU")
    ap.add_argument("--llama-types",
                    help="run only these of the llama.cpp weight types the pairings bring (comma list of "
                         "F32, BF16, Q8_0; default: all of them). A long state's llama.cpp run takes "
                         "minutes a type: --precisions fp32 --llama-types F32 runs the fp32 / F32 pair alone")
    ap.add_argument("--json", help="also write the results here")
    a = ap.parse_args()
    kev = os.path.abspath(a.kev)
    kev_cmd = (["env", f"KEV_ISA={a.isa}"] if a.isa else []) + [kev]
    os.makedirs(a.work, exist_ok=True)
    dims_list = a.dims.split(",")
    help_text = subprocess.run([kev, "forward", "--help"], capture_output=True, text=True).stdout
    asked = a.precisions.split(",")
    unknown = [p for p in asked if p not in PAIRINGS]
    if unknown:
        sys.exit(f"--precisions: unknown {unknown}; one or more of {list(PAIRINGS)}")
    kev_precisions = [p for p in PAIRINGS if p in asked and (p == "fp32" or "--precision" in help_text)]
    top_help = subprocess.run(kev_cmd + ["--help"], capture_output=True, text=True).stdout
    kev_precisions = [p for p in kev_precisions if p not in QUANTIZED or "quantize" in top_help]
    wanted = [t for p in kev_precisions for t in PAIRINGS[p]]
    only = a.llama_types.split(",") if a.llama_types else wanted
    if not set(only) <= set(wanted):
        sys.exit(f"--llama-types: {a.llama_types!r} is not a comma list of the types the precisions pair with "
                 f"({sorted(set(wanted))})")
    try:
        lengths = [int(t) for t in a.tokens.split(",")]
    except ValueError:
        sys.exit(f"--tokens: not a comma list of integers: {a.tokens!r}")
    if any(not 2 <= n <= 65536 for n in lengths):
        sys.exit(f"--tokens: each length must be 2..65536, got {a.tokens}")
    src, bins = llama_cpp(a.cache, a.llama_version, a.isa)
    commit = subprocess.run(["git", "-C", src, "rev-parse", "HEAD"], capture_output=True, text=True).stdout.strip()
    cpu = subprocess.run(kev_cmd + ["cpu"], capture_output=True, text=True).stdout.strip()
    model_name = next((l.split(":", 1)[1].strip() for l in open("/proc/cpuinfo") if l.startswith("model name")), "?")

    plan = {}
    for dims in dims_list:
        types = sorted({t for t in only if t != "F32" or dims in a.f32_at.split(",")},
                       key=TYPE_ORDER.index)
        bundle = kev_bundle(kev, a.work, dims)
        bundles = {p: bundle for p in kev_precisions}
        for p in kev_precisions:
            if p in QUANTIZED:
                bundles[p] = quantized_bundle(kev, bundle, a.work, dims, p)
        plan[dims] = (bundles, ggufs(src, bins, bundle, a.work, dims, types))
    inputs = kev_inputs(a.work, lengths)

    samples = {}  # (dims, tokens, engine, precision) -> [tok/s], rss
    load = [os.getloadavg()[0]]
    for rnd in range(a.rounds):
        for dims, (bundle, gg) in plan.items():
            for n_tokens in lengths:
                order = [("kev", p) for p in kev_precisions] + [("llama.cpp", t) for t in gg]
                # alternate: kev, llama, kev, llama ... (kev runs repeat when there are fewer of them)
                mixed = []
                ks, ls = [o for o in order if o[0] == "kev"], [o for o in order if o[0] != "kev"]
                for i in range(max(len(ks), len(ls))):
                    if i < len(ks):
                        mixed.append(ks[i])
                    if i < len(ls):
                        mixed.append(ls[i])
                if rnd % 2:
                    mixed.reverse()
                for engine, prec in mixed:
                    if engine == "kev":
                        tps, rss = kev_run(kev_cmd, bundle[prec], inputs, n_tokens, a.work, a.threads,
                                           "int8" if prec in QUANTIZED else prec)
                    else:
                        tps, rss = llama_run(bins, gg[prec], n_tokens, a.threads, a.flash_attn,
                                             a.llama_omp_wait_policy, a.llama_warmup == "on")
                    s = samples.setdefault((dims, n_tokens, engine, prec), {"tps": [], "rss_kib": 0})
                    s["tps"].append(tps)
                    s["rss_kib"] = max(s["rss_kib"], rss)
                    log(f"round {rnd + 1} {dims} {n_tokens} tokens {engine} {prec}: {tps:.2f} tok/s, "
                        f"peak RSS {rss / 1024:.0f} MiB")
        load.append(os.getloadavg()[0])

    result = {"cpu": model_name, "kev_cpu": json.loads(cpu) if cpu.startswith("{") else cpu,
              "isa": a.isa or "best", "threads": a.threads, "rounds": a.rounds, "state_tokens": lengths, "flash_attn": a.flash_attn,
              "llama_cpp": {"npm": f"node-llama-cpp@{a.llama_version}", "commit": commit},
              "load_average_1min": load, "llama_omp_wait_policy": a.llama_omp_wait_policy,
              "llama_warmup": a.llama_warmup, "command": " ".join(sys.argv), "results": []}
    for (dims, n_tokens, engine, prec), s in samples.items():
        result["results"].append({"dims": dims, "tokens": n_tokens, "engine": engine, "precision": prec,
                                  "median_tok_s": round(statistics.median(s["tps"]), 2),
                                  "runs_tok_s": [round(x, 2) for x in s["tps"]],
                                  "peak_rss_mib": round(s["rss_kib"] / 1024)})
    med = {(r["dims"], r["tokens"], r["engine"], r["precision"]): r["median_tok_s"] for r in result["results"]}
    result["ratios"] = [{"dims": d, "tokens": n, "kev": p, "llama.cpp": t,
                         "ratio": round(med[(d, n, "kev", p)] / med[(d, n, "llama.cpp", t)], 2)}
                        for d in plan for n in lengths for p in kev_precisions for t in PAIRINGS[p]
                        if (d, n, "llama.cpp", t) in med]
    if a.json:
        with open(a.json, "w") as f:
            json.dump(result, f, indent=2)
    print(f"CPU: {model_name}; level: {a.isa or 'each engine its best'}; kev cpu: {cpu}; threads {a.threads}; median of {a.rounds} rounds; "
          f"llama.cpp {commit[:12]} (node-llama-cpp@{a.llama_version}), -fa {a.flash_attn}, OMP_WAIT_POLICY "
          f"{a.llama_omp_wait_policy}; 1-min load average per round {load}")
    print("| dims | tokens | engine | precision | tokens/s (median) | runs | peak RSS MiB |")
    print("|---|---|---|---|---|---|---|")
    for r in result["results"]:
        print(f"| {r['dims']} | {r['tokens']} | {r['engine']} | {r['precision']} | {r['median_tok_s']} | "
              f"{', '.join(map(str, r['runs_tok_s']))} | {r['peak_rss_mib']} |")
    print("| dims | tokens | kev | llama.cpp | kev / llama.cpp |")
    print("|---|---|---|---|---|")
    for r in result["ratios"]:
        print(f"| {r['dims']} | {r['tokens']} | {r['kev']} | {r['llama.cpp']} | {r['ratio']}x |")

if __name__ == "__main__":
    main()
