"""Kev 1.0 conformance of every answer field, against a reference of 1.0's mapping written here from its
formulas (kev/api.py of the 1.0 release: _normalize, choice_confidence, score_confidence, round_prob,
to_answers; kev/serve.py Server._body; kev/model.py admit/encode; docs/api.md names the revisions).

Upstream runs on Python >= 3.12, whose sum() of floats is Neumaier-compensated; /usr/bin/python3 here may be
3.11 (a plain left-to-right sum), so `py_sum` below implements CPython 3.12's builtin_sum_impl float path
(and is checked against the interpreter's sum() when that is 3.12 or later). round() is Python's own (correctly
rounded from the exact binary value in every version).

- Property tests drive the real mapping (text/api.h answers_json, python_sum, python_round) through a test
  hook (tests/hooks/answers_hook.cpp) with distributions chosen here: 1..255 options, ties, all zeros,
  denormal and tiny values, unnormalised sums, exact rounding ties. Compared: the whole answers object
  (values bit for bit, key order), rounded to 4 decimals and unrounded.
- Request fixtures through `kev score` and `kev serve` on a synthetic bundle: the served (unrounded) option
  probabilities are read with --decimals -1; the default body must be exactly what the reference makes of
  them, with 1.0's keys: usage exactly {input_tokens, output_tokens} (plus state_tokens / state_tokens_used
  when truncating), latency_ms to 1 decimal; kev's extra usage fields only with --usage-details.
- The over-limit texts (1.0's state message with thousands separators and the KEV_TRUNCATE_STATES hint; its
  row message), KEV_DTYPE and /v1/models' dtype, and 1.0's default limits.
"""
import json
import math
import os
import random
import subprocess
import sys

import pytest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "pylib"))
from kevtest import KEV_BIN, ServeProcess, run_kev, synth_bundle  # noqa: E402

HOOK = os.environ.get("KEV_ANSWERS_HOOK", os.path.join(os.path.dirname(KEV_BIN), "tests", "kev_answers_hook"))


# ----------------------------------------------------------------------------------------------------------------
# The reference: Kev 1.0's mapping, from its formulas.

def py_sum(xs):
    """CPython >= 3.12 sum(xs) for a list of floats (start 0): the first float is added to the int 0, each
    further one by Neumaier's compensated step; the compensation is added at the end when non-zero and finite."""
    if not xs:
        return 0
    s = 0 + xs[0]
    c = 0.0
    for x in xs[1:]:
        t = s + x
        if abs(s) >= abs(x):
            c += (s - t) + x
        else:
            c += (x - t) + s
        s = t
    if c and math.isfinite(c):
        s += c
    return s


def naive_sum(xs):
    s = 0
    for x in xs:
        s = s + x
    return s


def normalize(p, add):
    t = add(p)
    return [1 / len(p)] * len(p) if t == 0 else [x / t for x in p]


def first_max(p):
    return max(range(len(p)), key=lambda i: p[i])


def choice_confidence(p, add=py_sum):
    k = len(p)
    return 1.0 if k == 1 else (max(normalize(p, add)) - 1 / k) / (1 - 1 / k)


def score_confidence(p, add=py_sum):
    n = len(p)
    if n == 1:
        return 1.0
    q = normalize(p, add)
    mode = first_max(q)
    d = add([abs(i - (n - 1) / 2) for i in range(n)]) / n
    return max(0.0, 1.0 - add([qi * abs(i - mode) for i, qi in enumerate(q)]) / d)


def rnd(x, decimals):
    return x if decimals < 0 else round(float(x), decimals)


def to_answers(questions, probs, decimals=4, add=py_sum):
    """1.0's to_answers over (id, type, keys, legend) questions and their option probabilities."""
    out = {}
    for (qid, qtype, keys, legend), p in zip(questions, probs):
        if qtype == "noul":
            out[qid] = {"type": "noul", "noul": rnd(p[1], decimals)}
        elif qtype == "choice":
            out[qid] = {"type": "choice", "choice": keys[first_max(p)],
                        "confidence": rnd(choice_confidence(p, add), decimals),
                        "probabilities": {k: rnd(v, decimals) for k, v in zip(keys, p)}}
        else:
            out[qid] = {"type": "score", "score": rnd(add([i * pi for i, pi in enumerate(p)]), decimals),
                        "legend": legend, "probabilities": {str(i): rnd(v, decimals) for i, v in enumerate(p)},
                        "confidence": rnd(score_confidence(p, add), decimals)}
    return out


def render(v, indent=0):
    """1.0's render (kev/api.py), for the score legend."""
    pad = "  " * indent
    if v is None:
        return ""
    if isinstance(v, (str, int, float, bool)):
        return str(v)
    if isinstance(v, list):
        return "\n".join(f"{pad}- {render(x, indent + 1).lstrip()}" for x in v)
    return "\n".join(f"{pad}{k}:\n{render(x, indent + 1)}" if isinstance(x, (dict, list)) else f"{pad}{k}: {render(x)}"
                     for k, x in v.items())


def questions_of(request):
    out = []
    for qid, q in request["questions"].items():
        if q["type"] == "noul":
            out.append((qid, "noul", ["false", "true"], None))
        elif q["type"] == "choice":
            out.append((qid, "choice", list(q["criteria"]), None))
        else:
            keys = [str(i) for i in range(len(q["criteria"]))]
            out.append((qid, "score", keys, dict(zip(keys, (render(x) for x in q["criteria"])))))
    return out


def exact(v):
    """JSON text that tells every float bit apart (repr; -0.0 from 0.0) and keeps key order."""
    return json.dumps(v)


def test_reference_sum_is_cpython_312s():
    # Values CPython 3.12+ gives, where the left-to-right sum differs.
    assert py_sum([0.1] * 10) == 1.0 and naive_sum([0.1] * 10) == 0.9999999999999999
    assert py_sum([1e100, 1.0, -1e100, 1.0]) == 2.0
    assert py_sum([0.1, 0.2, 0.3]) == 0.6
    assert math.copysign(1, py_sum([-0.0])) == 1.0
    assert py_sum([math.inf, 1.0]) == math.inf and py_sum([1e308, 1e308]) == math.inf
    if sys.version_info >= (3, 12):   # the interpreter's own sum() is the oracle there
        rng = random.Random(5)
        for _ in range(2000):
            xs = [rng.choice([rng.random(), rng.random() * 1e-300, rng.uniform(-1, 1) * 10 ** rng.randint(-20, 20)])
                  for _ in range(rng.randint(1, 40))]
            assert py_sum(xs).hex() == sum(xs).hex()


# ----------------------------------------------------------------------------------------------------------------
# Property tests through the mapping's hook.

def hook(lines):
    if not os.path.exists(HOOK):
        pytest.fail(f"{HOOK} is missing: build the kev_answers_hook target (cmake --build build/ci)")
    text = "".join(json.dumps(x, allow_nan=False) + "\n" for x in lines)
    proc = subprocess.run([HOOK], input=text, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr
    out = [json.loads(x) for x in proc.stdout.splitlines()]
    assert len(out) == len(lines)
    return out


def f32(x):
    import struct
    return struct.unpack("<f", struct.pack("<f", x))[0]


def softmax32(logits):
    """A float32 softmax, as the served probabilities are float32 values."""
    m = max(logits)
    e = [math.exp(z - m) for z in logits]
    s = math.fsum(e)
    return [f32(x / s) for x in e]


def distribution(rng, k, kind):
    if kind == "softmax":
        scale = rng.choice([0.1, 1.0, 3.0, 10.0, 40.0])
        return softmax32([rng.gauss(0, scale) for _ in range(k)])
    if kind == "ties":
        p = softmax32([rng.choice([0.0, 1.0, 2.0]) for _ in range(k)])
        return p
    if kind == "zeros":
        return [0.0] * k
    if kind == "denormal":
        return [rng.choice([0.0, 5e-324, 1e-310, 2.5e-308, 1e-320]) for _ in range(k)]
    if kind == "tiny":
        return [rng.random() * 1e-300 for _ in range(k)]
    if kind == "unnormalised":
        return [rng.random() * rng.choice([0.3, 1.0, 2.0]) for _ in range(k)]
    if kind == "one-hot":
        p = [0.0] * k
        p[rng.randrange(k)] = 1.0
        return p
    if kind == "round-ties":   # exact binary ties at the 4th decimal (odd multiples of 1/32) and near them
        return [rng.choice([1 / 32, 3 / 32, 5 / 32, 0.00005, 0.00015, 0.12345, 0.5, 0.0]) for _ in range(k)]
    raise AssertionError(kind)


KINDS = ["softmax", "ties", "zeros", "denormal", "tiny", "unnormalised", "one-hot", "round-ties"]


def random_request(rng, k):
    qtype = "noul" if k == 2 and rng.random() < 0.3 else rng.choice(["choice", "score"])
    if qtype == "noul":
        q = {"type": "noul"}
    elif qtype == "choice":
        q = {"type": "choice", "criteria": {f"o{i}": None for i in range(k)}}
    else:
        q = {"type": "score", "criteria": [f"level {i}" for i in range(k)]}
    return {"state": "s", "questions": {"q": q}}


def cases(seed, n):
    rng = random.Random(seed)
    out = []
    for i in range(n):
        k = rng.choice([1, 2, 3, 4, 5, 7, 10, 16, 32, 64, 100, 128, 200, 254, 255]) if i % 3 else rng.randint(1, 255)
        kind = KINDS[i % len(KINDS)]
        out.append((random_request(rng, k), [distribution(rng, k, kind)]))
    return out


@pytest.mark.parametrize("decimals", [4, -1])
def test_random_distributions_match_the_reference(decimals):
    batch = cases(26, 2400)
    got = hook([{"request": r, "probabilities": p, "decimals": decimals} for r, p in batch])
    differs_from_naive = 0
    for (request, probs), answer in zip(batch, got):
        want = to_answers(questions_of(request), probs, decimals)
        assert exact(answer) == exact(want), (request["questions"]["q"]["type"], probs)
        differs_from_naive += exact(want) != exact(to_answers(questions_of(request), probs, decimals, naive_sum))
    # The cases are sharp enough to tell a compensated sum from a left-to-right one (unrounded, many do).
    if decimals < 0:
        assert differs_from_naive > 50, differs_from_naive


def test_edge_cases_by_hand():
    three = {"state": "s", "questions": {"c": {"type": "choice", "criteria": {"a": None, "b": None, "c": None}},
                                         "s": {"type": "score", "criteria": ["lo", "mid", "hi"]}}}
    lines = [
        (three, [[0.2553, 0.2264, 0.5183], [0.2553, 0.2264, 0.5183]]),   # the example: score confidence 0.0
        (three, [[0.0, 0.0, 0.0], [0.0, 0.0, 0.0]]),                     # all zero: uniform, confidences 0
        (three, [[0.4, 0.4, 0.2], [0.4, 0.4, 0.2]]),                     # ties: the first
        (three, [[5e-324, 5e-324, 0.0], [5e-324, 0.0, 5e-324]]),         # denormals: normalised to halves
        (three, [[0.1, 0.1, 0.1], [0.1, 0.1, 0.1]]),                     # sum 0.30000000000000004 left to right
    ]
    got = hook([{"request": r, "probabilities": p} for r, p in lines])
    for (request, probs), answer in zip(lines, got):
        assert exact(answer) == exact(to_answers(questions_of(request), probs)), probs
    assert got[0]["s"]["confidence"] == 0.0 and got[0]["c"]["choice"] == "c"
    assert got[1]["c"]["confidence"] == 0.0 and got[1]["s"]["confidence"] == 0.0 and got[1]["s"]["score"] == 0.0
    assert got[2]["c"]["choice"] == "a"
    assert got[3]["c"]["confidence"] == 0.25 and got[3]["c"]["choice"] == "a"
    # Key order of each answer, as 1.0's to_answers writes it.
    assert list(got[0]["c"]) == ["type", "choice", "confidence", "probabilities"]
    assert list(got[0]["s"]) == ["type", "score", "legend", "probabilities", "confidence"]


def test_sum_and_round_hooks():
    rng = random.Random(7)
    sums = [[rng.random() for _ in range(rng.randint(1, 300))] for _ in range(300)]
    sums += [[0.1] * 10, [1e100, 1.0, -1e100, 1.0], [-0.0], [-0.0, -0.0], [1e308, 1e308], [0.1, 0.2, 0.3]]
    got = hook([{"sum": xs} for xs in sums])
    for xs, g in zip(sums, got):
        assert g["sum"] == repr(py_sum(xs)), xs
    xs = [rng.random() * rng.choice([1, 1e-4, 300]) for _ in range(3000)] + [i / 32 for i in range(64)] + [0.00005, 2.675]
    for n in (1, 4):
        got = hook([{"round": x, "decimals": n} for x in xs] + [{"round": -1e-20, "decimals": n}])
        for x, g in zip(xs + [-1e-20], got):
            assert g["round"] == repr(round(x, n)), (x, n)


# ----------------------------------------------------------------------------------------------------------------
# Request fixtures through the real binary.

STATE = {"customer": "Ada", "cart": ["tea", "scones"], "note": "asked about delivery on 2026-03-03"}
REQUEST = {"model": "jev-latest", "state": STATE, "questions": {
    "next": {"type": "choice", "instructions": "Next step?", "criteria": {"ship": "confirm", "refund": None, "wait": ""}},
    "upsell": {"type": "noul", "instructions": "Offer a discount?"},
    "mood": {"type": "score", "instructions": "Satisfaction", "criteria": ["angry", "neutral", {"very": "happy"}, 4]},
    "only": {"type": "choice", "instructions": "", "criteria": {"one": None}},
    "level": {"type": "score", "criteria": ["single"]},
    "many": {"type": "choice", "instructions": "Pick", "criteria": {f"opt{i}": None for i in range(255)}},
    "wide": {"type": "score", "instructions": "Rate", "criteria": [str(i) for i in range(40)]},
}}


@pytest.fixture(scope="module")
def bundle(tmp_path_factory):
    return synth_bundle(tmp_path_factory.mktemp("conformance"), "--seed", 11)[1]


def served_probabilities(answers):
    """Option probabilities, unrounded (--decimals -1 prints every double in its shortest round-trip form)."""
    return [[None, a["noul"]] if a["type"] == "noul" else list(a["probabilities"].values()) for a in answers.values()]


def score_json(bundle, req, *flags, env=None):
    proc = run_kev("score", "--bundle", bundle, *flags, input=json.dumps(req), env=env)
    return json.loads(proc.stdout)


def test_fixture_bodies_are_kev_10s(bundle):
    raw = score_json(bundle, REQUEST, "--decimals", "-1")
    probs = served_probabilities(raw["answers"])
    body = score_json(bundle, REQUEST)
    # The body: 1.0's keys and order; usage exactly input_tokens and output_tokens; latency_ms to 1 decimal.
    assert list(body) == ["model", "answers", "usage", "latency_ms"]
    assert body["model"] == "jev-latest"
    assert list(body["usage"]) == ["input_tokens", "output_tokens"]
    assert isinstance(body["latency_ms"], float) and body["latency_ms"] == round(body["latency_ms"], 1) >= 0
    assert body["usage"]["input_tokens"] == raw["usage"]["input_tokens"] > 0
    # The answers: exactly the reference's, from the served probabilities (noul: p(yes) is what is served).
    want = to_answers(questions_of(REQUEST), probs)
    assert exact(body["answers"]) == exact(want)
    assert exact(raw["answers"]) == exact(to_answers(questions_of(REQUEST), probs, -1))


def test_usage_details_and_truncation_fields(bundle):
    plain = score_json(bundle, REQUEST)
    detailed = score_json(bundle, REQUEST, "--usage-details")
    assert list(detailed["usage"]) == ["input_tokens", "output_tokens", "state_tokens", "cached_tokens",
                                       "input_tokens_details"]
    assert detailed["usage"]["input_tokens_details"] == {"cached_tokens": detailed["usage"]["cached_tokens"]}
    assert exact(detailed["answers"]) == exact(plain["answers"])
    assert score_json(bundle, REQUEST, env={"KEV_USAGE_DETAILS": "1"})["usage"].keys() == detailed["usage"].keys()
    # A truncating server (1.0's KEV_TRUNCATE_STATES=1): state_tokens / state_tokens_used, then `truncated` last.
    for flags, env in ((("--truncate",), None), ((), {"KEV_TRUNCATE_STATES": "1"})):
        cut = score_json(bundle, REQUEST, "--max-state", 8, *flags, env=env)
        assert list(cut) == ["model", "answers", "usage", "latency_ms", "truncated"] and cut["truncated"] is True
        assert list(cut["usage"]) == ["input_tokens", "output_tokens", "state_tokens", "state_tokens_used"]
        assert cut["usage"]["state_tokens_used"] == 8 < cut["usage"]["state_tokens"]
    whole = score_json(bundle, REQUEST, "--truncate")
    assert whole["truncated"] is False and whole["usage"]["state_tokens"] == whole["usage"]["state_tokens_used"]
    both = score_json(bundle, REQUEST, "--truncate", "--usage-details")
    assert list(both["usage"]) == ["input_tokens", "output_tokens", "state_tokens", "state_tokens_used",
                                   "cached_tokens", "input_tokens_details"]
    proc = run_kev("score", "--bundle", bundle, input=json.dumps(REQUEST), env={"KEV_USAGE_DETAILS": "yes"},
                   check=False)
    assert proc.returncode == 2 and 'KEV_USAGE_DETAILS must be 0 or 1, not "yes"' in proc.stderr


def tokens(bundle, text):
    out = run_kev("tokenize", "--tokenizer", os.path.join(bundle, "tokenizer.json"), input=text).stdout
    return len(json.loads(out)["ids"])


def state_message(n, limit):
    """1.0's refusal (kev/model.py admit + kev/serve.py Server.submit), thousands separators included."""
    return (f"state is {n:,} tokens, over the {limit:,}-token limit (the <state> token included): shorten the "
            f"document or split it across requests; or start the server with KEV_TRUNCATE_STATES=1 to read only "
            f"its first {limit:,} tokens (responses then say truncated: true)")


def long_request(words):
    return {"state": " ".join(f"w{i % 97}" for i in range(words)),
            "questions": {"q": {"type": "noul", "instructions": "Is it long?"}}}


def test_over_limit_messages(bundle):
    req = long_request(1500)
    n = tokens(bundle, req["state"]) + 1
    assert n > 1000
    proc = run_kev("score", "--bundle", bundle, "--jsonl", "--max-state", 1000, input=json.dumps(req) + "\n",
                   check=False)
    assert json.loads(proc.stdout) == {"detail": state_message(n, 1000), "status": 422}
    # Exactly at the limit is taken; one over is refused.
    ok = run_kev("score", "--bundle", bundle, "--jsonl", "--max-state", n, input=json.dumps(req) + "\n")
    assert json.loads(ok.stdout)["usage"]["input_tokens"] > n
    over = run_kev("score", "--bundle", bundle, "--jsonl", "--max-state", n - 1, input=json.dumps(req) + "\n",
                   check=False)
    assert json.loads(over.stdout)["detail"] == state_message(n, n - 1)
    # The row: 1.0's encode message, the branch counted as <q> instructions (<opt> option </opt>)* <decide>.
    q = {"type": "choice", "instructions": "Which one of these?", "criteria": {"alpha": "the first", "beta": None}}
    row = {"state": "short state", "questions": {"a": {"type": "noul"}, "b": q}}
    s = tokens(bundle, "short state") + 1
    branch = 1 + tokens(bundle, q["instructions"]) + (2 + tokens(bundle, "alpha: the first")) + (2 + tokens(bundle, "beta")) + 1
    limit = s + branch - 1
    proc = run_kev("score", "--bundle", bundle, "--jsonl", "--max-row", limit, input=json.dumps(row) + "\n",
                   check=False)
    assert json.loads(proc.stdout) == {
        "detail": f"branch too long: {branch} tokens with a {s}-token state (row limit {limit})", "status": 422}
    ok = run_kev("score", "--bundle", bundle, "--jsonl", "--max-row", limit + 1, input=json.dumps(row) + "\n")
    assert "answers" in json.loads(ok.stdout)


def test_serve_fields_limits_and_dtype(bundle):
    s = ServeProcess(bundle, "--max-state", 1000)
    try:
        status, _, models = s.request("GET", "/v1/models")
        assert status == 200 and [m["dtype"] for m in models["models"]] == ["float32", "float32"]
        assert models["models"][0]["max_state_tokens"] == 1000
        status, _, raw = s.score(REQUEST)
        assert status == 200 and list(raw) == ["model", "answers", "usage", "latency_ms"]
        assert list(raw["usage"]) == ["input_tokens", "output_tokens"]
        assert raw["latency_ms"] == round(raw["latency_ms"], 1)
        cli = score_json(bundle, REQUEST, "--decimals", "-1")
        assert exact(raw["answers"]) == exact(to_answers(questions_of(REQUEST), served_probabilities(cli["answers"])))
        req = long_request(1500)
        status, _, refused = s.score(req)
        assert status == 422 and refused == {"detail": state_message(tokens(bundle, req["state"]) + 1, 1000)}
        # separate: the passes' latencies summed as Python's sum() and rounded to 1 decimal; usage as 1.0's.
        status, _, sep = s.request("POST", "/v1/systemone/separate", REQUEST, {"Content-Type": "application/json"})
        assert status == 200 and list(sep) == ["model", "answers", "usage", "latency_ms"]
        assert list(sep["usage"]) == ["input_tokens", "output_tokens"] and sep["latency_ms"] == round(sep["latency_ms"], 1)
        perm = {"request": REQUEST, "question": "next", "n_perm": 3, "seed": 1}
        status, _, p = s.request("POST", "/v1/systemone/permute", perm, {"Content-Type": "application/json"})
        assert status == 200 and list(p) == ["runs", "argmax_stable", "spread"]
        assert all(r["latency_ms"] == round(r["latency_ms"], 1) for r in p["runs"])
    finally:
        s.close()
    # 1.0's defaults: a 65,536-token state and a 73,728-token row; no whole-request cap.
    s = ServeProcess(bundle)
    try:
        models = s.request("GET", "/v1/models")[2]["models"][0]
        assert models["max_state_tokens"] == 65536 and models["dtype"] == "float32"
    finally:
        s.close()


@pytest.mark.parametrize("value, dtype", [("bf16", "bfloat16"), ("bfloat16", "bfloat16"), ("fp32", "float32"),
                                          ("float32", "float32")])
def test_kev_dtype(bundle, value, dtype):
    env = dict(os.environ, KEV_DTYPE=value)
    s = ServeProcess(bundle, env=env)
    try:
        assert s.request("GET", "/v1/models")[2]["models"][0]["dtype"] == dtype
    finally:
        s.close()
    # The flag wins over the variable; both int8 modes report torch's int8.
    for precision in ("int8", "w8a8"):
        s = ServeProcess(bundle, "--precision", precision, env=env)
        try:
            assert s.request("GET", "/v1/models")[2]["models"][0]["dtype"] == "int8"
        finally:
            s.close()


@pytest.mark.parametrize("value, code, message", [
    ("fp16", 5, "KEV_DTYPE=fp16 (float16) is not computed by kev: use fp32 or bf16"),
    ("half", 2, 'KEV_DTYPE must be fp32, float32, bf16 or bfloat16, not "half"'),
    ("BF16", 2, 'KEV_DTYPE must be fp32, float32, bf16 or bfloat16, not "BF16"')])
def test_kev_dtype_refused_by_name(bundle, value, code, message):
    for cmd in (("serve", "--bundle", bundle, "--port", 0), ("score", "--bundle", bundle)):
        proc = run_kev(*cmd, input=json.dumps(REQUEST), env={"KEV_DTYPE": value}, check=False, timeout=120)
        assert proc.returncode == code and message in proc.stderr, (cmd, proc.stderr)
