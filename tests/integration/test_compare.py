"""`kev compare` through the real binary on result files made by `kev score --jsonl` over the
shipped example (examples/typed-decisions.jsonl) on a synthetic bundle, and on copies perturbed
here by known amounts. Every drift figure is recomputed here from the files with numpy
(independent of the C++ code): per question max |dp|, argmax and flips, the reference top-two
margin, confidence and score drift, and the summary percentiles."""
import json
import os
import sys

import numpy as np
import pytest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "pylib"))
from kevtest import SOURCE_DIR, run_kev, synth_bundle  # noqa: E402

EXAMPLE = os.path.join(SOURCE_DIR, "examples", "typed-decisions.jsonl")
GATE_FAILED = 1
BAD_INPUT = 2


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    d = tmp_path_factory.mktemp("compare")
    bundle = synth_bundle(d, "--seed", 21)[1]
    text = open(EXAMPLE).read()
    out = {}
    for precision in ("fp32", "int8"):
        proc = run_kev("score", "--bundle", bundle, "--jsonl", "--precision", precision, input=text)
        path = d / f"{precision}.jsonl"
        path.write_text(proc.stdout)
        out[precision] = path
    out["dir"] = d
    return out


def read(path):
    return [json.loads(l) for l in open(path) if l.strip()]


def write(path, records):
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    return path


def dist(answer):
    """(keys, probabilities) of one answer, as the documented result-file shape defines them."""
    if answer["type"] == "noul":
        return ["no", "yes"], [1 - answer["noul"], answer["noul"]]
    return list(answer["probabilities"]), list(answer["probabilities"].values())


def oracle(a_records, b_records):
    """Per-question figures from the documented definitions, by line."""
    out = []
    for i, (ra, rb) in enumerate(zip(a_records, b_records)):
        for qid, qa in ra["answers"].items():
            qb = rb["answers"][qid]
            keys, p = dist(qa)
            kb, qv = dist(qb)
            q = np.array([dict(zip(kb, qv))[k] for k in keys], dtype=np.float64)
            p = np.array(p, dtype=np.float64)
            s = np.sort(p)[::-1]
            out.append({
                "record": ra.get("id", f"line {i + 1}"), "question": qid,
                "max_dp": float(np.max(np.abs(p - q))),
                "argmax_a": keys[int(np.argmax(p))], "argmax_b": keys[int(np.argmax(q))],
                "margin": float(s[0] - s[1]) if len(s) > 1 else 1.0,
                "confidence_drift": abs(qb["confidence"] - qa["confidence"]) if "confidence" in qa else None,
                "score_drift": abs(qb["score"] - qa["score"]) if "score" in qa else None,
            })
    return out


def compare(a, b, *gates, tmp=None):
    report = os.path.join(os.path.dirname(str(a)), "report.json")
    if os.path.exists(report):
        os.remove(report)
    proc = run_kev("compare", a, b, "--json", report, *gates, check=False)
    return proc, (json.load(open(report)) if proc.returncode in (0, GATE_FAILED) else None)


def check_against_oracle(report, a, b):
    want = oracle(read(a), read(b))
    got = report["questions"]
    assert len(got) == len(want) > 0
    for g, w in zip(got, want):
        assert (g["record"], g["question"]) == (w["record"], w["question"])
        assert g["max_dp"] == pytest.approx(w["max_dp"], abs=1e-12)
        assert g["margin"] == pytest.approx(w["margin"], abs=1e-12)
        assert (g["argmax_a"], g["argmax_b"]) == (w["argmax_a"], w["argmax_b"])
        assert g["flip"] == (w["argmax_a"] != w["argmax_b"])
        for k in ("confidence_drift", "score_drift"):
            if w[k] is None:
                assert g[k] is None
            else:
                assert g[k] == pytest.approx(w[k], abs=1e-12)
    dp = np.array([w["max_dp"] for w in want])
    for name, q in (("p50", 50), ("p90", 90), ("p99", 99), ("max", 100)):
        assert report["summary"]["max_dp"][name] == pytest.approx(float(np.percentile(dp, q)), abs=1e-12)
    flips = [w for w in want if w["argmax_a"] != w["argmax_b"]]
    assert report["summary"]["flips"] == len(flips)
    assert report["summary"]["agreement"] == pytest.approx(1 - len(flips) / len(want), abs=1e-12)
    # Flips by A's margin in the documented bands (acceptance.md).
    edges = [0.0, 0.005, 0.01, 0.02, 0.05, 0.1, None]
    bands = report["summary"]["flips_by_margin"]
    assert [(b["margin_from"], b["margin_below"]) for b in bands] == list(zip(edges[:-1], edges[1:]))
    for b in bands:
        inside = [w for w in want if w["margin"] >= b["margin_from"]
                  and (b["margin_below"] is None or w["margin"] < b["margin_below"])]
        assert b["questions"] == len(inside)
        assert b["flips"] == sum(w["argmax_a"] != w["argmax_b"] for w in inside)


def test_against_itself_zero_drift(files):
    proc, report = compare(files["fp32"], files["fp32"], "--max-probability-drift", "0", "--max-flips", "0")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert report["pass"] and report["matched_by"] == "line"
    assert report["compared"] == 12 and len(report["questions"]) == 36
    assert all(q["max_dp"] == 0 and not q["flip"] for q in report["questions"])
    check_against_oracle(report, files["fp32"], files["fp32"])


def test_int8_within_the_parity_budget(files):
    proc, report = compare(files["fp32"], files["int8"], "--max-probability-drift", "0.03",
                           "--max-flips-above-margin", "0.02")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    check_against_oracle(report, files["fp32"], files["int8"])
    assert report["summary"]["max_dp"]["max"] > 0  # int8 is not bit-identical: the figure is real


def perturbed(files, name, edit):
    recs = read(files["fp32"])
    edit(recs)
    return write(files["dir"] / name, recs)


def shift(answer, frm, to, amount):
    answer["probabilities"][frm] = round(answer["probabilities"][frm] - amount, 6)
    answer["probabilities"][to] = round(answer["probabilities"][to] + amount, 6)


def test_probability_drift_gate_catches_a_known_shift(files):
    def edit(recs):  # 0.01 moved between two non-top options of one question: no flip
        a = recs[4]["answers"]["urgency"]
        keys = sorted(a["probabilities"], key=a["probabilities"].get)
        shift(a, keys[1], keys[0], 0.01)
    b = perturbed(files, "drift.jsonl", edit)
    proc, report = compare(files["fp32"], b, "--max-probability-drift", "0.005", "--max-flips", "0")
    assert proc.returncode == GATE_FAILED, proc.stdout + proc.stderr
    assert "gate max-probability-drift 0.005: FAIL" in proc.stdout
    assert "gate max-flips 0: pass" in proc.stdout
    check_against_oracle(report, files["fp32"], b)
    worst = max(report["questions"], key=lambda q: q["max_dp"])
    assert (worst["record"], worst["question"]) == ("line 5", "urgency")
    assert worst["max_dp"] == pytest.approx(0.01, abs=2e-6)
    proc, _ = compare(files["fp32"], b, "--max-probability-drift", "0.011")
    assert proc.returncode == 0, proc.stdout


def flip_question(recs, want_large_margin):
    """Swaps the top two options of the first choice or score question whose reference margin
    is (not) >= 0.02."""
    for r in recs:
        for a in r["answers"].values():
            if "probabilities" not in a:
                continue
            p = a["probabilities"]
            top = sorted(p, key=p.get, reverse=True)
            margin = p[top[0]] - p[top[1]]
            if (margin >= 0.02) == want_large_margin and margin > 0:
                p[top[0]], p[top[1]] = p[top[1]], p[top[0]]
                if "choice" in a:
                    a["choice"] = top[1]
                return
    raise AssertionError("no question with such a margin in the example")


def test_flip_gates(files):
    big = perturbed(files, "flip_big.jsonl", lambda recs: flip_question(recs, True))
    proc, report = compare(files["fp32"], big, "--max-flips", "0")
    assert proc.returncode == GATE_FAILED and "gate max-flips 0: FAIL (1)" in proc.stdout, proc.stdout
    check_against_oracle(report, files["fp32"], big)
    proc, _ = compare(files["fp32"], big, "--max-flips-above-margin", "0.02")
    assert proc.returncode == GATE_FAILED and "FLIP" in proc.stdout, proc.stdout
    proc, _ = compare(files["fp32"], big, "--max-flips", "1")
    assert proc.returncode == 0, proc.stdout

    small = perturbed(files, "flip_small.jsonl", lambda recs: flip_question(recs, False))
    proc, _ = compare(files["fp32"], small, "--max-flips-above-margin", "0.02")
    assert proc.returncode == 0, proc.stdout  # the budget allows flips below the margin
    proc, _ = compare(files["fp32"], small, "--max-flips", "0")
    assert proc.returncode == GATE_FAILED, proc.stdout


def test_matching_by_id_in_any_order_and_wrapped_records(files):
    ids = [json.loads(l)["id"] for l in open(EXAMPLE)]
    recs = read(files["fp32"])
    a = write(files["dir"] / "a_ids.jsonl", [dict(r, id=i) for i, r in zip(ids, recs)])
    wrapped = [{"id": i, "status": 200, "response": r} for i, r in zip(ids, read(files["int8"]))]
    b = write(files["dir"] / "b_ids.jsonl", wrapped[::-1])
    proc, report = compare(a, b)
    assert proc.returncode == 0, proc.stderr
    assert report["matched_by"] == "id" and report["compared"] == 12
    check_against_oracle(report, a, write(files["dir"] / "b_sorted.jsonl", [dict(r, id=i) for i, r in zip(ids, read(files["int8"]))]))


def test_an_error_on_one_side_fails_the_gates(files):
    recs = read(files["fp32"])
    recs[2] = {"detail": "the server was busy", "status": 503}
    b = write(files["dir"] / "one_error.jsonl", recs)
    proc, report = compare(files["fp32"], b)
    assert proc.returncode == 0  # no gate asked: a report only
    assert report["compared"] == 11 and len(report["one_sided"]) == 1
    proc, _ = compare(files["fp32"], b, "--max-probability-drift", "0.5")  # drift 0 here: passes
    assert proc.returncode == GATE_FAILED and "answered-on-both-sides 0: FAIL" in proc.stdout


@pytest.mark.parametrize("edit,message", [
    (lambda recs: recs.__setitem__(3, "not json"), "line 4"),
    (lambda recs: recs[0]["answers"]["route"]["probabilities"].__setitem__("billing", 1.5), "probability in [0, 1]"),
    (lambda recs: recs[0]["answers"]["escalate"].__setitem__("noul", "high"), "answers.escalate.noul must be a number"),
    (lambda recs: recs[1].pop("answers"), "neither a response"),
    (lambda recs: recs[1]["answers"].__setitem__("other", recs[1]["answers"].pop("urgency")), "question \"urgency\" is missing"),
    (lambda recs: recs[1]["answers"]["route"]["probabilities"].pop("support"), "has 4 options in one and 3"),
    (lambda recs: recs[1]["answers"]["urgency"].__setitem__("type", "choice"), "is a score answer in one and a choice"),
    (lambda recs: recs.pop(), "must hold the same number"),
])
def test_malformed_or_mismatched_files_are_refused(files, edit, message):
    recs = read(files["fp32"])
    edit(recs)
    b = files["dir"] / "bad.jsonl"
    b.write_text("".join((r if isinstance(r, str) else json.dumps(r)) + "\n" for r in recs))
    proc = run_kev("compare", files["fp32"], b, "--max-flips", "0", check=False)
    assert proc.returncode == BAD_INPUT, proc.stdout + proc.stderr
    assert message in proc.stderr and proc.stderr.startswith("kev compare: ")
    assert proc.stdout == ""


def test_ids_must_match(files):
    recs = read(files["fp32"])
    a = write(files["dir"] / "ida.jsonl", [dict(r, id=f"q{i}") for i, r in enumerate(recs)])
    b = write(files["dir"] / "idb.jsonl", [dict(r, id=f"q{i + 1}") for i, r in enumerate(recs)])
    proc = run_kev("compare", a, b, check=False)
    assert proc.returncode == BAD_INPUT and "id \"q0\"" in proc.stderr and "is not in" in proc.stderr
    dup = write(files["dir"] / "dup.jsonl", [dict(r, id="same") for r in recs])
    proc = run_kev("compare", dup, dup, check=False)
    assert proc.returncode == BAD_INPUT and "appears twice" in proc.stderr
    empty = files["dir"] / "empty.jsonl"
    empty.write_text("\n")
    proc = run_kev("compare", empty, a, check=False)
    assert proc.returncode == BAD_INPUT and "no result record" in proc.stderr
    proc = run_kev("compare", files["dir"] / "missing.jsonl", a, check=False)
    assert proc.returncode == 4 and "missing.jsonl" in proc.stderr
