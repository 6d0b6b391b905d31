#!/usr/bin/python3
"""Peak memory of a quantized Kev-27B, measured on prefixes of its layers at its real dimensions.

A 64-layer checkpoint at Kev-27B's dimensions is 54 GB, and its export as much again; a prefix
of N layers (N a multiple of 4: whole periods of three GDN layers and one attention layer) is not.
For each depth in --depths (default 4 and 8) this runs, under `directory`:
  kev synth --form full at Kev-27B's dimensions (hidden 5120, MLP 17408, attention 24/4 heads of
  256, GDN 16/48 heads of 128, vocabulary 248,320) -> kev pin / kev export --model kev-27b
  (KEV_PIN_DEPTH_PREFIX=1: a test build only) -> kev quantize once per layer form (FORMS): "q4"
  (GDN query/key rows at 8 bits, every other projection at 4: layers 16-63 of the default, all
  but 0-1 of the compact selection), "q8" (every projection at 8 bits: layers 0-15 of the
  default), "q5" (every projection at 5 bits) and "q4-qk5" (the q4 form with the GDN query/key
  rows at 5 bits);
then serves the q4 bundle with --precision int8 and one long state (bench/long_state_replay.py
--state-a-only; --words 3560 is an 8,262-token state) and reads the server's peak (VmHWM).

From two depths it fits peak = constant + periods x per-period (both measured) and gives the
64-layer figure of each selection (SELECTIONS): every period in the q4 form, plus the bytes by
which its layers in another form exceed their q4 form, taken from the bundles' sizes (per period
of 4 layers, so a count that is not a multiple of 4 is priced at the period's average layer).
It times and takes the peak RSS of the export and the quantizations too (they stream).
Disk: every depth's exact bundle and its four forms stay under `work` (the checkpoint is removed
after export), about 48 GB for depths 4 and 8 (4 layers 5.6 + 3.4 + 4.3 + 3.6 + 3.4 GB, 8 layers
8.6 + 4.3 + 6.0 + 4.7 + 4.3); remove it when done.

  /usr/bin/python3 bench/member_prefix.py build/ci/kev /tmp/prefix --json /tmp/prefix.json
KEV must be a test build (the ci preset's build/ci/kev): a release build ignores the hook, and its
kev pin refuses the prefix as another layout than Kev-27B's.
"""
import argparse
import json
import os
import re
import shutil
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
DIMS = ["--hidden", "5120", "--intermediate", "17408", "--heads", "24", "--kv-heads", "4", "--head-dim", "256",
        "--linear-key-heads", "16", "--linear-value-heads", "48", "--linear-key-dim", "128",
        "--linear-value-dim", "128"]
LAYERS = 64
Q4_CLASSES = "attn_q,attn_k,attn_v,attn_o,gdn_v,gdn_z,gdn_out,mlp_gate,mlp_up,mlp_down"
# The layer forms the selections below are made of: a layer (period) stored in one of these.
FORMS = {"q4": ["--q8", "gdn_q,gdn_k", "--q4", Q4_CLASSES], "q8": ["--q8", "all", "--q4", "none"],
         "q5": ["--q8", "none", "--q4", "none", "--q5", "all"],
         "q4-qk5": ["--q8", "none", "--q4", Q4_CLASSES, "--q5", "gdn_q,gdn_k"]}
# The selections priced at 64 layers: {form: layers}, the q4 form for the rest
# (docs/notes/quantization-study.md names them).
SELECTIONS = {"default": {"q8": 16}, "compact": {"q8": 2}, "q8-first4": {"q8": 4}, "q8-first8": {"q8": 8},
              "q5-first16": {"q5": 16}, "q5-first16-qk": {"q5": 16, "q4-qk5": 48},
              "q8-first2-q5-qk": {"q8": 2, "q5": 14, "q4-qk5": 48},
              "q8-first4-q5-qk": {"q8": 4, "q5": 12, "q4-qk5": 48},
              "q8-first2-q5to23-qk": {"q8": 2, "q5": 22, "q4-qk5": 40}}
MIB = 1 << 20


def timed(cmd, env=None):
    """Runs cmd under /usr/bin/time -v: (wall seconds, peak RSS MiB)."""
    proc = subprocess.run(["/usr/bin/time", "-v", *cmd], capture_output=True, text=True, env=env)
    if proc.returncode != 0:
        raise SystemExit(f"{' '.join(cmd)} failed ({proc.returncode}): {proc.stderr[-2000:]}")
    wall = re.search(r"Elapsed \(wall clock\) time \(h:mm:ss or m:ss\): ([\d:.]+)", proc.stderr).group(1)
    seconds = sum(float(p) * 60 ** i for i, p in enumerate(reversed(wall.split(":"))))
    rss = int(re.search(r"Maximum resident set size \(kbytes\): (\d+)", proc.stderr).group(1)) // 1024
    return round(seconds, 1), rss


def size(path):
    return sum(os.path.getsize(os.path.join(d, f)) for d, _, fs in os.walk(path) for f in fs)


def prefix(kev, work, layers, words, threads, seed, prefill_step):
    """Makes the prefix's bundles (unless there) and serves its q4 one: a dict of figures."""
    d = os.path.join(work, f"layers-{layers}")
    os.makedirs(d, exist_ok=True)
    env = dict(os.environ, KEV_PIN_DEPTH_PREFIX="1")
    out = {"layers": layers}
    bundle = os.path.join(d, "bundle")
    if not os.path.exists(bundle):
        synth = os.path.join(d, "synth")
        shutil.rmtree(synth, ignore_errors=True)
        out["synth_s"], _ = timed([kev, "synth", "--out", synth, "--shape", "4b", "--form", "full", "--layers",
                                   str(layers), *DIMS, "--temperature", "1.32", "--seed", str(seed), "--quiet"])
        ck, recipe = os.path.join(synth, "checkpoint"), os.path.join(d, "recipe.json")
        subprocess.run([kev, "pin", "--model", "kev-27b", "--checkpoint", ck, "--out", recipe], check=True,
                       env=env, capture_output=True)
        out["export_s"], out["export_rss_mib"] = timed(
            [kev, "export", "--recipe", recipe, "--checkpoint", ck, "--out", bundle, "--quiet"], env)
        shutil.rmtree(synth)
    out["bundle_bytes"] = size(bundle)
    for form, spec in FORMS.items():
        q = os.path.join(d, form)
        if not os.path.exists(q):
            out[f"quantize_{form}_s"], out[f"quantize_{form}_rss_mib"] = timed(
                [kev, "quantize", "--bundle", bundle, "--out", q, "--format", "q4", *spec, "--quiet"])
        out[f"{form}_bytes"] = size(q)
    proc = subprocess.run([sys.executable, os.path.join(HERE, "long_state_replay.py"), "--kev", kev, "--bundle",
                           os.path.join(d, "q4"), "--precision", "int8", "--words", str(words), "--threads",
                           str(threads), "--prefill-step", str(prefill_step), "--state-a-only", "--log",
                           os.path.join(d, f"serve-{prefill_step}.log")],
                          capture_output=True, text=True, check=True)
    state = re.search(r'"state_tokens":(\d+)', proc.stdout)
    peak = re.findall(r"peak (\{.*\})", proc.stdout)[-1]
    out["state_tokens"] = int(state.group(1))
    out["serve_peak_mib"] = json.loads(peak.replace("'", '"'))["hwm"]
    out["prefill_s"] = float(re.search(r"state A: 200 ([\d.]+) s", proc.stdout).group(1))
    print(json.dumps(out), flush=True)
    return out


def whole(runs):
    """The 64-layer figures from the two shallowest runs."""
    a, b = runs[0], runs[1]
    periods = (b["layers"] - a["layers"]) // 4
    per_period_mib = (b["serve_peak_mib"] - a["serve_peak_mib"]) / periods
    period = {form: (b[f"{form}_bytes"] - a[f"{form}_bytes"]) / periods for form in FORMS}
    fixed_bytes = a["q4_bytes"] - period["q4"] * (a["layers"] // 4)
    q4_all_mib = b["serve_peak_mib"] + per_period_mib * ((LAYERS - b["layers"]) // 4)
    result = {"per_period_peak_mib": round(per_period_mib), "constant_peak_mib":
              round(a["serve_peak_mib"] - per_period_mib * (a["layers"] // 4)),
              "form_period_bytes": {form: round(v) for form, v in period.items()},
              "fixed_bytes": round(fixed_bytes), "selections": {}}
    for name, forms in SELECTIONS.items():
        extra = sum((period[form] - period["q4"]) * n / 4 for form, n in forms.items())
        r = {"layers": forms, "disk_bytes": round(fixed_bytes + period["q4"] * LAYERS / 4 + extra),
             "peak_mib": round(q4_all_mib + extra / MIB)}
        r["peak_gb"] = round(r["peak_mib"] * MIB / 1e9, 2)
        result["selections"][name] = r
    return result


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("kev")
    ap.add_argument("work")
    ap.add_argument("--depths", default="4,8", help="prefix depths, multiples of 4 (default 4,8)")
    ap.add_argument("--words", type=int, default=3560, help="words of the served state (3560: 8,262 tokens)")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--seed", type=int, default=27)
    ap.add_argument("--prefill-step", type=int, default=2048, help="kev serve --prefill-step")
    ap.add_argument("--json")
    a = ap.parse_args()
    depths = sorted(int(x) for x in a.depths.split(","))
    if len(depths) < 2 or any(x <= 0 or x % 4 or x >= LAYERS for x in depths):
        raise SystemExit("--depths: at least two multiples of 4 below 64")
    runs = [prefix(a.kev, a.work, n, a.words, a.threads, a.seed, a.prefill_step) for n in depths]
    result = {"runs": runs, "kev_27b": whole(runs)}
    print(json.dumps(result["kev_27b"], indent=2))
    if a.json:
        with open(a.json, "w") as f:
            json.dump(result, f, indent=2)


if __name__ == "__main__":
    main()
