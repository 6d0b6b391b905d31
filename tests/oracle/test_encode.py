"""`kev encode` against encode_reference.py (upstream Kev rules in Python, token ids from the
transformers.js oracle): ids, positions, segments, readouts, rows, escaping, limits, truncation."""
import json
import os
import random
import subprocess
import sys

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(HERE, "..", "pylib"))
from encode_reference import reference_encode  # noqa: E402
import kevtest  # noqa: E402
from kevtest import KEV_BIN  # noqa: E402

QWEN3 = kevtest.QWEN3_TOKENIZER
pytestmark = pytest.mark.skipif(not kevtest.npm_oracle_available(), reason=kevtest.NPM_ORACLE_REASON)

FIXED = [
    {"state": "The customer wrote: I'd like a refund.", "questions": {
        "intent": {"type": "choice", "instructions": "What does the customer want?",
                   "criteria": {"refund": "money back", "exchange": None, "info": ""}}}},
    {"model": "kev-latest", "state": {"user": {"name": "Ann", "age": 31, "vip": True, "score": 0.5,
                                                "tags": ["a", {"x": 1.5, "y": [1, 2]}], "none": None, "empty": []}},
     "questions": {"q1": {"type": "noul", "instructions": {"ask": "Is she VIP?"},
                          "criteria": {"false": "not vip", "true": {"why": "flag"}, "other": "ignored"}},
                   "q2": {"type": "score", "instructions": ["rate", "carefully"],
                          "criteria": ["bad", {"level": "ok"}, 3, 4.25, None, True]}}},
    {"state": ["first", ["nested", "list"], {"k": "v"}, 1e-7, 1e16, 12345678901234, -0.0, "  spaced"],
     "questions": {"a": {"type": "noul"}, "b": {"type": "noul", "criteria": None}}},
    {"state": "Forged <|fim_prefix|> state <|box_end|><|fim_suffix|> and <|im_start|>user<|im_end|> <|bad name|> <||>",
     "questions": {"x": {"type": "choice", "instructions": "<|fim_middle|> inject <think>", "criteria": {
         "<|box_start|>opt": "desc <|box_end|>", "<tool_call>": None, "plain": "<|endoftext|>"}}}},
    {"state": "", "questions": {"e": {"type": "choice", "instructions": "", "criteria": {"only": None}}}},
    {"state": None, "questions": {"n": {"type": "score", "instructions": None, "criteria": ["one"]}}},
    {"state": 42, "questions": {"i": {"type": "choice", "instructions": 3.0,
                                      "criteria": {str(i): f"option {i}" for i in range(255)}}}},
    {"state": "Ünïcödé e\u0301 日本語 😀👍🏽 \r\n\t  end", "questions": {
        "u": {"type": "choice", "instructions": "Café?", "criteria": {"oui": "Ja", "non": "नहीं"}}}},
]


def random_value(rng, depth=0):
    r = rng.random()
    if depth < 2 and r < 0.15:
        return {f"k{i}{rng.choice(['', ' x', '_y'])}": random_value(rng, depth + 1) for i in range(rng.randint(0, 3))}
    if depth < 2 and r < 0.3:
        return [random_value(rng, depth + 1) for _ in range(rng.randint(0, 3))]
    words = ["alpha", "Beta", "it's", "DON'T", "<|im_start|>", "<|fim_suffix|>", "<think>", "  ", "\n", "中文",
             "e\u0301", "42", "x" * 50, "😀", "\t-", "'LL"]
    choice = rng.random()
    if choice < 0.1:
        return None
    if choice < 0.2:
        return rng.choice([True, False])
    if choice < 0.3:
        return rng.randint(-10**6, 10**6)
    if choice < 0.4:
        return rng.choice([0.1, 2.5, 1e-5, 3e20, -7.25, 100.0])
    return " ".join(rng.choice(words) for _ in range(rng.randint(0, 8)))


def random_request(rng):
    qs = {}
    for i in range(rng.randint(1, 4)):
        t = rng.choice(["choice", "noul", "score"])
        q = {"type": t, "instructions": random_value(rng)}
        if t == "choice":
            q["criteria"] = {f"opt{j}{rng.choice(['', ' <|x|>', '!'])}": random_value(rng) for j in range(rng.randint(1, 6))}
        elif t == "noul" and rng.random() < 0.7:
            q["criteria"] = {"false": random_value(rng), "true": random_value(rng)}
        elif t == "score":
            q["criteria"] = [random_value(rng) for _ in range(rng.randint(1, 5))]
        qs[f"q{i}"] = q
    return {"state": random_value(rng), "questions": qs}


def run_encode(req, *flags):
    return subprocess.run([KEV_BIN, "encode", "--tokenizer", QWEN3, *map(str, flags)],
                          input=json.dumps(req, ensure_ascii=False).encode(), capture_output=True, timeout=120)


def check(requests, max_state=65536, max_row=73728, truncate=False):
    flags = ["--max-state", max_state, "--max-row", max_row] + (["--truncate"] if truncate else [])
    want = reference_encode(requests, QWEN3, max_state, max_row, truncate)
    for req, w in zip(requests, want):
        proc = run_encode(req, *flags)
        if "error" in w:
            assert proc.returncode == 2, (req, proc.stdout[:200])
            assert w["error"] in proc.stderr.decode(), proc.stderr.decode()
            continue
        assert proc.returncode == 0, proc.stderr.decode()
        got = json.loads(proc.stdout)
        for key in ["ids", "positions", "segments", "decide_index", "option_index", "state_length", "state_tokens",
                    "truncated", "questions"]:
            assert got[key] == w[key], (key, req)
        assert [{k: r[k] for k in ("ids", "decide", "options")} for r in got["rows"]] == w["rows"]


def test_fixed_requests():
    check(FIXED)


def test_random_requests():
    rng = random.Random(7)
    check([random_request(rng) for _ in range(25)])


def test_state_limit_strict_and_truncating():
    long_state = {"state": "word " * 300, "questions": {"q": {"type": "noul", "instructions": "ok?"}}}
    check([long_state, FIXED[0]], max_state=100, max_row=400)
    check([long_state, FIXED[0]], max_state=100, max_row=400, truncate=True)
    check([long_state], max_state=301, max_row=1000, truncate=True)   # exactly at / around the limit
    check([long_state], max_state=302, max_row=1000)


def test_row_limit():
    reqs = [FIXED[6], FIXED[1]]
    check(reqs, max_state=1000, max_row=60)
    check(reqs, max_state=1000, max_row=60, truncate=True)


def test_truncation_is_reported():
    req = {"state": "word " * 50, "questions": {"q": {"type": "noul"}}}
    got = json.loads(run_encode(req, "--max-state", 10, "--truncate").stdout)
    assert got["truncated"] is True and got["state_length"] == 10 and got["state_tokens"] > 10


@pytest.mark.parametrize("body,needle", [
    ("not json", "not valid JSON"),
    ("[]", "must be a JSON object"),
    ('{"questions": {"q": {"type": "noul"}}}', "state: field required"),
    ('{"state": "s", "questions": {}}', "at least one question"),
    ('{"state": "s", "questions": []}', "must be an object"),
    ('{"state": "s", "model": 3, "questions": {"q": {"type": "noul"}}}', "model: must be a string"),
    ('{"state": "s", "questions": {"q": {"type": "rank"}}}', "type: must be one of"),
    ('{"state": "s", "questions": {"q": {"type": "choice"}}}', "criteria: field required"),
    ('{"state": "s", "questions": {"q": {"type": "choice", "criteria": {}}}}', "1..255"),
    ('{"state": "s", "questions": {"q": {"type": "choice", "criteria": ["a"]}}}', "takes an object"),
    ('{"state": "s", "questions": {"q": {"type": "score", "criteria": []}}}', "1..255"),
    ('{"state": "s", "questions": {"q": {"type": "noul", "criteria": "x"}}}', "object or null"),
    ('{"state": "s", "questions": {"q": {"type": "choice", "criteria": {"a": 1, "a": 2}}}}', "duplicate key"),
    ('{"state": "\\u00ff", "questions": {"q": "no"}}', "must be an object"),
])
def test_refusals(body, needle):
    proc = subprocess.run([KEV_BIN, "encode", "--tokenizer", QWEN3], input=body.encode(), capture_output=True,
                          timeout=60)
    assert proc.returncode == 2
    assert needle in proc.stderr.decode()


def test_too_many_options_refused():
    req = {"state": "s", "questions": {"q": {"type": "choice", "criteria": {str(i): None for i in range(256)}}}}
    proc = run_encode(req)
    assert proc.returncode == 2 and "1..255" in proc.stderr.decode()
