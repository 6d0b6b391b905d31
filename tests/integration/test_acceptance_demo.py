"""scripts/acceptance-demo.sh, the acceptance recipe of docs/acceptance.md, run end to end on a
synthetic model through the real binary: it must exit 0 (fp32 against itself with zero drift,
int8 through kev serve + kev bench within the parity budget, a perturbed file caught by the
gates), and the figures it gated on are recomputed here from its files with numpy."""
import json
import os
import subprocess
import sys

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "pylib"))
from kevtest import KEV_BIN, SOURCE_DIR  # noqa: E402


def answers(path):
    """[(record, question) -> probabilities] of a result file's answered records, in order
    (kev bench files: the feasibility pass only, as documented)."""
    out = []
    for line in open(path):
        r = json.loads(line)
        if "kev_bench" in r or "kev_bench_summary" in r or r.get("phase", "feasibility") != "feasibility":
            continue
        r = r.get("response", r)
        d = {}
        for qid, a in r["answers"].items():
            d[qid] = {"no": 1 - a["noul"], "yes": a["noul"]} if a["type"] == "noul" else a["probabilities"]
        out.append(d)
    return out


def max_dp(a, b):
    assert len(a) == len(b)
    return max(max(abs(x[q][k] - y[q][k]) for k in x[q]) for x, y in zip(a, b) for q in x)


def flips_above(a, b, margin):
    n = 0
    for x, y in zip(a, b):
        for q in x:
            keys = list(x[q])
            p = np.array([x[q][k] for k in keys])
            s = np.sort(p)[::-1]
            if keys[int(np.argmax(p))] != keys[int(np.argmax([y[q][k] for k in keys]))] and s[0] - s[1] >= margin:
                n += 1
    return n


def test_acceptance_demo(tmp_path):
    env = dict(os.environ, KEV_BIN=KEV_BIN, KEV_DEMO_DIR=str(tmp_path))
    proc = subprocess.run([os.path.join(SOURCE_DIR, "scripts", "acceptance-demo.sh")], env=env,
                          capture_output=True, text=True, timeout=1200)
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-4000:]
    assert "(exit 1: caught, as it must be)" in proc.stdout
    assert "acceptance-demo: all checks held" in proc.stdout
    ref = answers(tmp_path / "reference.jsonl")
    int8 = answers(tmp_path / "int8-bench.jsonl")
    assert len(ref) == 12
    assert 0 < max_dp(ref, int8) <= 0.03 and flips_above(ref, int8, 0.02) == 0
    assert abs(max_dp(ref, answers(tmp_path / "perturbed.jsonl")) - 0.05) < 1e-6
    summary = json.loads(open(tmp_path / "int8-bench.jsonl").read().splitlines()[-1])["kev_bench_summary"]
    assert [lv["concurrency"] for lv in summary["levels"]] == [1, 1, 8, 16]
    assert all(lv["ranked"] for lv in summary["levels"])
    assert open(tmp_path / "latency.svg").read().startswith("<svg")
    assert open(tmp_path / "reliability.svg").read().startswith("<svg")
