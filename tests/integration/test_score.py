"""`kev score` through the real binary: invariances (a question alone or with others, a cached or
fresh state, permuted questions) and refusals (single request: one clear message and a non-zero
exit; JSON Lines: an error object for the bad line, the other lines still answered)."""
import json
import os
import sys

import pytest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "pylib"))
from kevtest import run_kev, synth_bundle  # noqa: E402

STATE = {"customer": "Ada", "cart": ["tea", "scones"], "note": "asked about delivery"}
QUESTIONS = {
    "next": {"type": "choice", "instructions": "Next step?", "criteria": {"ship": "confirm", "refund": None, "wait": ""}},
    "upsell": {"type": "noul", "instructions": "Offer a discount?"},
    "mood": {"type": "score", "instructions": "Satisfaction", "criteria": ["angry", "neutral", "happy", "delighted"]},
    "empty": {"type": "choice", "instructions": "", "criteria": {"only": None}},
}


@pytest.fixture(scope="module")
def bundle(tmp_path_factory):
    return synth_bundle(tmp_path_factory.mktemp("score"), "--seed", 3)[1]


def stream(bundle, reqs, *extra):
    text = "".join((r if isinstance(r, str) else json.dumps(r)) + "\n" for r in reqs)
    proc = run_kev("score", "--bundle", bundle, "--jsonl", "--decimals", "-1", *extra, input=text, check=False)
    return proc, [json.loads(l) for l in proc.stdout.splitlines()]


def probs(answer):
    return [answer["noul"]] if answer["type"] == "noul" else list(answer["probabilities"].values())


def test_single_request_shape(bundle):
    out = json.loads(run_kev("score", "--bundle", bundle,
                             input=json.dumps({"state": STATE, "questions": QUESTIONS})).stdout)
    assert set(out) == {"model", "answers", "usage", "latency_ms"}
    assert out["model"] == "kev-latest"
    assert list(out["answers"]) == list(QUESTIONS)
    assert out["usage"]["cached_tokens"] == 0
    # Upstream's output_tokens: tokens of json.dumps(answers) (Python's serialisation, done here).
    ids = json.loads(run_kev("tokenize", "--tokenizer", os.path.join(bundle, "tokenizer.json"), "--special",
                             input=json.dumps(out["answers"])).stdout)["ids"]
    assert out["usage"]["output_tokens"] == len(ids) > 0
    assert out["usage"]["input_tokens"] > out["usage"]["state_tokens"] > 1
    for a in out["answers"].values():  # default rounding: 4 decimals
        assert all(abs(p * 1e4 - round(p * 1e4)) < 1e-6 for p in probs(a))
    assert out["answers"]["empty"] == {"type": "choice", "choice": "only", "confidence": 1.0,
                                       "probabilities": {"only": 1.0}}


def test_question_alone_equals_question_with_others(bundle):
    together = {"state": STATE, "questions": QUESTIONS}
    alone = [{"state": STATE, "questions": {qid: q}} for qid, q in QUESTIONS.items()]
    proc, out = stream(bundle, [together] + alone)
    assert proc.returncode == 0, proc.stderr
    for i, qid in enumerate(QUESTIONS, start=1):
        assert out[i]["answers"][qid] == out[0]["answers"][qid]


def test_cached_state_equals_fresh_state(bundle):
    req = {"state": STATE, "questions": QUESTIONS}
    proc, out = stream(bundle, [req, req])
    assert out[0]["usage"]["cached_tokens"] == 0
    assert out[1]["usage"]["cached_tokens"] == out[1]["usage"]["state_tokens"]
    assert out[1]["answers"] == out[0]["answers"]
    # A fresh process, and a process with the cache disabled, give the same answers.
    _, fresh = stream(bundle, [req], "--cache-entries", "0")
    assert fresh[0]["usage"]["cached_tokens"] == 0
    assert fresh[0]["answers"] == out[0]["answers"]
    # Another state in between does not disturb the cached prefix.
    other = {"state": "something else entirely", "questions": QUESTIONS}
    _, mixed = stream(bundle, [req, other, req])
    assert mixed[2]["usage"]["cached_tokens"] > 0
    assert mixed[2]["answers"] == out[0]["answers"]
    assert mixed[1]["answers"] != out[0]["answers"]


def test_permuting_questions_permutes_answers(bundle):
    ids = list(QUESTIONS)
    shuffled = {qid: QUESTIONS[qid] for qid in reversed(ids)}
    _, out = stream(bundle, [{"state": STATE, "questions": QUESTIONS}, {"state": STATE, "questions": shuffled}])
    assert list(out[1]["answers"]) == list(reversed(ids))
    for qid in ids:
        assert out[1]["answers"][qid] == out[0]["answers"][qid]


def test_permuting_options_permutes_probabilities(bundle):
    q = QUESTIONS["next"]
    rev = dict(reversed(list(q["criteria"].items())))
    _, out = stream(bundle, [{"state": STATE, "questions": {"a": q}},
                             {"state": STATE, "questions": {"a": q | {"criteria": rev}}}])
    # Options are separate spans of one causal row, so order changes the hidden states: only the
    # keys follow the caller's order; the mapping must stay a distribution.
    assert list(out[1]["answers"]["a"]["probabilities"]) == list(rev)
    assert abs(sum(out[1]["answers"]["a"]["probabilities"].values()) - 1) < 1e-6


BAD = [
    ("{not json", 400, "not valid JSON"),
    (json.dumps({"state": "s", "questions": {"a": {"type": "ranking", "criteria": ["x"]}}}), 422, "type"),
    (json.dumps({"state": "s", "questions": {"a": {"type": "choice", "criteria": {}}}}), 422, "option"),
    (json.dumps({"state": "s", "questions": {"a": {"type": "choice",
                                                     "criteria": {f"o{i}": None for i in range(256)}}}}), 422, "255"),
    ('{"state": "s", "questions": {"a": {"type": "choice", "criteria": {"x": null, "x": "dup"}}}}', 422, "x"),
    (json.dumps({"state": "s", "questions": {}}), 422, "question"),
    (json.dumps({"state": "word " * 400, "questions": {"a": {"type": "noul"}}}), 422, "state"),
    ('{"questions": {"a": {"type": "noul"}}, "state": ' + "[" * 200000 + "]" * 200000 + "}", 422, "deeper"),
]


@pytest.mark.parametrize("body,status,needle", BAD, ids=[f"bad{i}" for i in range(len(BAD))])
def test_single_request_refusals(bundle, body, status, needle):
    proc = run_kev("score", "--bundle", bundle, "--max-state", "64", input=body, check=False)
    assert proc.returncode == 2
    assert proc.stdout == ""
    assert proc.stderr.startswith("kev score: ") and proc.stderr.count("\n") == 1
    assert needle.lower() in proc.stderr.lower()


def test_stream_answers_good_lines_around_bad_ones(bundle):
    good = {"state": STATE, "questions": {"upsell": QUESTIONS["upsell"]}}
    lines = [good] + [b for b, _, _ in BAD] + [good]
    proc, out = stream(bundle, lines, "--max-state", "64")
    assert proc.returncode == 2
    assert len(out) == len(lines)
    assert out[0]["answers"] == out[-1]["answers"]
    for got, (_, status, needle) in zip(out[1:-1], BAD):
        assert set(got) == {"detail", "status"}
        assert got["status"] == status
        assert needle.lower() in got["detail"].lower()


def test_bad_bundle_is_refused(tmp_path):
    proc = run_kev("score", "--bundle", tmp_path / "missing", input="{}", check=False)
    assert proc.returncode != 0
    assert "missing" in proc.stderr
