"""`kev calibrate` against an independent SciPy/numpy implementation: the fitted temperature
(scipy.optimize.minimize_scalar on the NLL, in log T) and every reported figure (accuracy, mean
confidence, NLL, Brier, ECE and each reliability bin), on logits and labels generated here, and
on the real logits of a synthetic bundle (checked against `kev score`'s own probabilities)."""
import json
import math
import os
import sys

import numpy as np
import pytest
from scipy.optimize import minimize_scalar
from scipy.special import log_softmax, softmax

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "pylib"))
from kevtest import SOURCE_DIR, run_kev, synth_bundle  # noqa: E402

EXAMPLE = os.path.join(SOURCE_DIR, "examples", "typed-decisions.jsonl")
T_MIN, T_MAX = 0.01, 100.0


def nll(samples, t):
    return float(np.mean([-log_softmax(np.asarray(z) / t)[y] for z, y in samples]))


def scipy_fit(samples):
    r = minimize_scalar(lambda u: nll(samples, math.exp(u)), bounds=(math.log(T_MIN), math.log(T_MAX)),
                        method="bounded", options={"xatol": 1e-10, "maxiter": 500})
    return math.exp(r.x)


def metrics(samples, t, bins=10):
    """The documented figures, in numpy (first-largest argmax, equal-width bins of max p)."""
    p = [softmax(np.asarray(z, dtype=np.float64) / t) for z, _ in samples]
    y = np.array([label for _, label in samples])
    top = np.array([int(np.argmax(q)) for q in p])
    conf = np.array([q.max() for q in p])
    right = (top == y).astype(np.float64)
    brier = np.mean([np.sum((q - np.eye(len(q))[label]) ** 2) for q, label in zip(p, y)])
    which = np.minimum(np.floor(conf * bins).astype(int), bins - 1)
    out_bins, ece = [], 0.0
    for b in range(bins):
        m = which == b
        n = int(m.sum())
        c = float(conf[m].mean()) if n else 0.0
        a = float(right[m].mean()) if n else 0.0
        ece += n / len(samples) * abs(a - c)
        out_bins.append({"count": n, "mean_confidence": c, "accuracy": a})
    return {"accuracy": float(right.mean()), "mean_confidence": float(conf.mean()), "nll": nll(samples, t),
            "brier": float(brier), "ece": ece, "bins": out_bins}


def check_metrics(got, want):
    for k in ("accuracy", "mean_confidence", "nll", "brier", "ece"):
        assert got[k] == pytest.approx(want[k], rel=1e-9, abs=1e-12), k
    for g, w in zip(got["bins"], want["bins"], strict=True):
        assert g["count"] == w["count"]
        assert g["mean_confidence"] == pytest.approx(w["mean_confidence"], rel=1e-9, abs=1e-12)
        assert g["accuracy"] == pytest.approx(w["accuracy"], rel=1e-9, abs=1e-12)


def write_logits(path, samples):
    path.write_text("".join(json.dumps({"logits": list(map(float, z)), "label": int(y)}) + "\n" for z, y in samples))
    return path


def calibrate(tmp_path, *args):
    report = tmp_path / "report.json"
    svg = tmp_path / "rel.svg"
    proc = run_kev("calibrate", *args, "--json", report, "--svg", svg)
    return proc, json.loads(report.read_text()), svg.read_text()


def generated(seed, n, true_t, scale):
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(n):
        k = int(rng.integers(2, 7))
        z = rng.normal(0, scale, size=k)
        y = int(rng.choice(k, p=softmax(z / true_t)))
        out.append((z, y))
    return out


@pytest.mark.parametrize("seed,true_t,scale", [(1, 2.0, 3.0), (2, 0.5, 1.0), (3, 1.0, 2.0)])
def test_fit_and_metrics_match_scipy(tmp_path, seed, true_t, scale):
    samples = generated(seed, 400, true_t, scale)
    proc, report, svg = calibrate(tmp_path, "--logits", write_logits(tmp_path / "z.jsonl", samples))
    t = report["fit"]["temperature"]
    assert not report["fit"]["at_bound"]
    ts = scipy_fit(samples)
    assert t == pytest.approx(ts, rel=1e-5)
    assert nll(samples, t) <= nll(samples, ts) + 1e-12  # at least as good a minimum
    assert report["samples"] == 400
    assert report["before"]["temperature"] == 1.0
    check_metrics(report["before"], metrics(samples, 1.0))
    check_metrics(report["after"], metrics(samples, t))
    assert svg.startswith("<svg") and svg.rstrip().endswith("</svg>")
    assert f"{t:.6g}" in proc.stdout


def test_overconfident_model_is_cooled(tmp_path):
    """Upstream's example: a model more confident than accurate; the fit raises T, lowers the
    mean confidence toward the accuracy, and lowers NLL and ECE (checked by the oracle too)."""
    samples = generated(7, 600, 2.5, 4.0)  # labels drawn at T=2.5 from logits served at T=1
    _, report, _ = calibrate(tmp_path, "--logits", write_logits(tmp_path / "z.jsonl", samples))
    b, a = report["before"], report["after"]
    assert b["mean_confidence"] > b["accuracy"] + 0.1
    assert report["fit"]["temperature"] == pytest.approx(scipy_fit(samples), rel=1e-5)
    assert report["fit"]["temperature"] > 1.5
    assert a["nll"] < b["nll"] and a["ece"] < b["ece"]
    assert abs(a["mean_confidence"] - a["accuracy"]) < abs(b["mean_confidence"] - b["accuracy"])


def test_before_temperature_flag(tmp_path):
    samples = generated(11, 200, 1.5, 2.0)
    _, report, _ = calibrate(tmp_path, "--logits", write_logits(tmp_path / "z.jsonl", samples),
                             "--temperature", "3.25", "--bins", "7")
    assert report["before"]["temperature"] == 3.25
    check_metrics(report["before"], metrics(samples, 3.25, bins=7))
    check_metrics(report["after"], metrics(samples, report["fit"]["temperature"], bins=7))


def test_separable_data_stops_at_the_bound(tmp_path):
    samples = [(np.array([5.0, 0.0, -1.0]), 0), (np.array([0.0, 4.0]), 1)] * 10
    _, report, _ = calibrate(tmp_path, "--logits", write_logits(tmp_path / "z.jsonl", samples))
    assert report["fit"]["at_bound"] and report["fit"]["temperature"] == T_MIN
    # NLL falls all the way down to the bound (SciPy stops where it is flat to float precision).
    grid = np.geomspace(T_MAX, T_MIN, 50)
    assert all(nll(samples, a) >= nll(samples, b) for a, b in zip(grid, grid[1:]))
    assert nll(samples, T_MIN) <= nll(samples, scipy_fit(samples))
    check_metrics(report["after"], metrics(samples, T_MIN))


def test_bundle_logits_are_the_scorers(tmp_path):
    """--bundle --labels: the labelled questions' raw logits (dumped) give kev score's
    probabilities at T=1, the labels map as documented, and the fit matches SciPy on them."""
    bundle = synth_bundle(tmp_path, "--seed", 5)[1]
    dump = tmp_path / "dump.jsonl"
    proc, report, _ = calibrate(tmp_path, "--bundle", bundle, "--labels", EXAMPLE, "--dump-logits", dump)
    dumped = [json.loads(l) for l in dump.read_text().splitlines()]
    requests = [json.loads(l) for l in open(EXAMPLE)]
    scored = [json.loads(l) for l in run_kev("score", "--bundle", bundle, "--jsonl", "--decimals", "-1",
                                             "--temperature", "1", input=open(EXAMPLE).read()).stdout.splitlines()]
    i = 0
    for req, resp in zip(requests, scored):
        for qid, q in req["questions"].items():
            d = dumped[i]
            i += 1
            a = resp["answers"][qid]
            if q["type"] == "noul":
                keys, probs = ["no", "yes"], [1 - a["noul"], a["noul"]]
            else:
                keys, probs = list(a["probabilities"]), list(a["probabilities"].values())
            assert np.max(np.abs(softmax(np.asarray(d["logits"])) - probs)) < 2e-6
            assert keys[d["label"]] == req["labels"][qid]
    assert i == len(dumped) == 36
    samples = [(np.asarray(d["logits"]), d["label"]) for d in dumped]
    manifest = json.load(open(os.path.join(bundle, "kev_export.json")))
    assert report["before"]["temperature"] == manifest["temperature"]
    check_metrics(report["before"], metrics(samples, manifest["temperature"]))
    assert report["fit"]["temperature"] == pytest.approx(scipy_fit(samples), rel=1e-5)
    check_metrics(report["after"], metrics(samples, report["fit"]["temperature"]))


@pytest.mark.parametrize("line,message", [
    ("not json", "line 2"),
    ('{"logits": [1, 2]}', "\"label\" must be the index"),
    ('{"logits": [1, 2], "label": 2}', "is not one of its 2 options"),
    ('{"logits": [], "label": 0}', "non-empty array"),
    ('{"logits": [1, "x"], "label": 0}', "numbers only"),
])
def test_bad_logits_refused(tmp_path, line, message):
    f = tmp_path / "z.jsonl"
    f.write_text('{"logits": [1, 2], "label": 0}\n' + line + "\n")
    proc = run_kev("calibrate", "--logits", f, check=False)
    assert proc.returncode == 2 and message in proc.stderr, proc.stderr


@pytest.mark.parametrize("labels,message", [
    ({"nope": "x"}, "labels.nope: no such question"),
    ({"route": "shipping"}, "labels.route: \"shipping\" is not one of the question's options"),
    ({"urgency": 7}, "level 7 is not one of the 4 levels"),
    ({"escalate": "maybe"}, "a noul label is true/false"),
])
def test_bad_labels_refused(tmp_path, labels, message):
    bundle = synth_bundle(tmp_path, "--seed", 5)[1]
    req = json.loads(open(EXAMPLE).readline())
    f = tmp_path / "l.jsonl"
    f.write_text(json.dumps(dict(req, labels=labels)) + "\n")
    proc = run_kev("calibrate", "--bundle", bundle, "--labels", f, check=False)
    assert proc.returncode == 2 and message in proc.stderr and "line 1" in proc.stderr, proc.stderr
