"""Parity of `kev score --precision bf16|int8` against the exact FP32 mode and the float64
reference (score_reference.py): shared by tests/oracle/test_precision.py and
bench/precision_bench.py.

The budget (docs/performance.md "Precision modes"): over every option probability of every
question, max |p_mode - p_ref| <= 0.03, and the argmax differs from the reference's only where
the reference's top-2 margin is < 0.02. A noul question counts as the two options (1 - p, p).
"""
import json
import math
import random

import kevtest

MAX_DP = 0.03
FLIP_MARGIN = 0.02

WORDS = ["alpha", "Beta", "refund", "delivery", "late", "order", "tea", "scones", "angry", "happy",
         "customer", "agent", "price", "délai", "日本語", "42", "yes", "no", "maybe", "cart"]


def _text(rng, lo, hi):
    return " ".join(rng.choice(WORDS) for _ in range(rng.randint(lo, hi)))


def requests(count_questions, seed=7):
    """Requests of 1-4 questions (choice, score and noul; 2-7 options) over short states, until
    at least count_questions questions."""
    rng = random.Random(seed)
    out, n = [], 0
    while n < count_questions:
        qs = {}
        for j in range(rng.randint(1, 4)):
            kind = rng.choice(["choice", "choice", "score", "noul"])
            instr = _text(rng, 1, 6)
            if kind == "noul":
                qs[f"q{j}"] = {"type": "noul", "instructions": instr}
            elif kind == "score":
                qs[f"q{j}"] = {"type": "score", "instructions": instr,
                               "criteria": [_text(rng, 1, 3) for _ in range(rng.randint(2, 7))]}
            else:
                qs[f"q{j}"] = {"type": "choice", "instructions": instr,
                               "criteria": {f"o{i}_{rng.choice(WORDS)}": _text(rng, 1, 4)
                                            for i in range(rng.randint(2, 7))}}
        out.append({"model": "kev-latest", "state": {"note": _text(rng, 3, 20), "id": rng.randint(0, 999)},
                    "questions": qs})
        n += len(qs)
    return out


def probs_of(answer):
    if answer["type"] == "noul":
        return [1.0 - answer["noul"], answer["noul"]]
    return list(answer["probabilities"].values())


def score(bundle, reqs, precision, *extra):
    """[[per-question option probabilities]] in request order (question order within)."""
    proc = kevtest.run_kev("score", "--bundle", bundle, "--jsonl", "--decimals", "-1",
                           "--precision", precision, *extra,
                           input="".join(json.dumps(r) + "\n" for r in reqs), timeout=7200)
    lines = [json.loads(l) for l in proc.stdout.splitlines()]
    assert len(lines) == len(reqs), proc.stderr
    out = []
    for line in lines:
        assert "answers" in line, line
        out.extend(probs_of(a) for a in line["answers"].values())
    return out


def reference_probs(ref_out):
    """The same layout from ScoringReference.score output (a noul's two options are (false, true))."""
    return [p for r in ref_out for p in r["probabilities"].values()]


def rescale(probs, f):
    """Probabilities of a softmax(l / T) head at temperature T / f, from those at T (log p = l / T
    + c, so softmax(f log p) is exact up to rounding; p is clipped at 1e-300)."""
    out = []
    for p in probs:
        lg = [math.log(max(x, 1e-300)) * f for x in p]
        mx = max(lg)
        e = [math.exp(x - mx) for x in lg]
        s = sum(e)
        out.append([x / s for x in e])
    return out


def _pct(values, q):
    v = sorted(values)
    return v[min(len(v) - 1, int(round(q * (len(v) - 1))))] if v else float("nan")


def compare(mode, ref):
    """Per-question max |dp|, top-2 margins of the reference, argmax flips (with margins)."""
    assert len(mode) == len(ref)
    dps, margins, flips = [], [], []
    for m, r in zip(mode, ref):
        assert len(m) == len(r)
        dps.append(max(abs(a - b) for a, b in zip(m, r)))
        top = sorted(r, reverse=True)
        margin = top[0] - top[1] if len(top) > 1 else 1.0
        margins.append(margin)
        am = max(range(len(m)), key=lambda i: (m[i], -i))
        ar = max(range(len(r)), key=lambda i: (r[i], -i))
        if am != ar:
            flips.append(margin)
    return {"questions": len(ref), "dp": dps, "margins": margins, "flips": flips}


def summary(c):
    d, mg = c["dp"], c["margins"]
    return {"questions": c["questions"],
            "dp_p50": _pct(d, 0.5), "dp_p90": _pct(d, 0.9), "dp_p99": _pct(d, 0.99), "dp_max": max(d),
            "margin_p10": _pct(mg, 0.1), "margin_p50": _pct(mg, 0.5), "margin_p90": _pct(mg, 0.9),
            "margin_lt_0.02": sum(1 for x in mg if x < FLIP_MARGIN),
            "flips": len(c["flips"]), "flip_margin_max": max(c["flips"]) if c["flips"] else None}


def within_budget(c):
    s = summary(c)
    return s["dp_max"] <= MAX_DP and all(m < FLIP_MARGIN for m in c["flips"])
