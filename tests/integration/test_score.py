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
    proc = run_kev("score", "--bundle", bundle, "--jsonl", "--decimals", "-1", "--usage-details", *extra, input=text,
                   check=False)
    return proc, [json.loads(l) for l in proc.stdout.splitlines()]


def probs(answer):
    return [answer["noul"]] if answer["type"] == "noul" else list(answer["probabilities"].values())


def test_single_request_shape(bundle):
    out = json.loads(run_kev("score", "--bundle", bundle, "--usage-details",
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


def test_prefill_step_changes_no_answer(bundle):
    """--prefill-step cuts a long state's prefill into more steps (less scratch; that the step is
    in effect: test_serve_admission's budget test): every answer is the default step's, bit for
    bit, and the usage counts are too."""
    long_state = {"log": [f"turn {i}: the customer asked about parcel {i * 37 % 101}" for i in range(40)]}
    req = {"state": long_state, "questions": QUESTIONS}
    proc, want = stream(bundle, [req], "--cache-entries", "0")
    assert proc.returncode == 0, proc.stderr
    assert want[0]["usage"]["state_tokens"] > 3 * 64  # several steps of 64 tokens
    for step in ("64", "192"):
        proc, got = stream(bundle, [req], "--cache-entries", "0", "--prefill-step", step)
        assert proc.returncode == 0, proc.stderr
        assert got[0]["answers"] == want[0]["answers"], step
        assert got[0]["usage"] == want[0]["usage"], step


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


# ---------------------------------------------------------------- bundles kev does not implement

def edited_bundle(bundle, tmp_path, edit):
    """A copy of `bundle` (symlinks) whose manifest is edited as a newer kev might write it. The
    manifest is not among its own "outputs", so no digest changes."""
    d = tmp_path / "edited"
    d.mkdir()
    for name in os.listdir(bundle):
        if name != "kev_export.json":
            os.symlink(os.path.join(bundle, name), d / name)
    with open(os.path.join(bundle, "kev_export.json")) as f:
        m = json.load(f)
    edit(m)
    with open(d / "kev_export.json", "w") as f:
        json.dump(m, f)
    return d


def set_field(key, value):
    return lambda m: m["checkpoint_fields"].__setitem__(key, value)


NEWER = [
    (set_field("option_isolation", True), "checkpoint_fields.option_isolation is true"),
    (set_field("special_embeddings", True), "checkpoint_fields.special_embeddings is true"),
    (set_field("weights", "full"), 'checkpoint_fields.weights is "full"'),
    (set_field("weights_dtype", "int4"), 'checkpoint_fields.weights_dtype is "int4"'),
    (set_field("multimodal", True), "checkpoint_fields.multimodal is true"),
    (set_field("quantization", {"bits": 4}), 'checkpoint_fields.quantization is {"bits":4}'),
    (set_field("trainable_token_indices", [248060]), "checkpoint_fields.trainable_token_indices is [248060]"),
    (set_field("attention_sinks", 4), "checkpoint_fields.attention_sinks (4)"),
    (lambda m: m.__setitem__("rope_scaling", {"factor": 2}), 'key "rope_scaling"'),
    (lambda m: m["dtypes"].__setitem__("weights", "I8"), 'dtypes.weights is "I8"'),
    (lambda m: m["dtypes"].__setitem__("activations", "BF16"), "dtypes.activations"),
    (lambda m: m.__setitem__("format", "kev-4b-merged/2"), '"format" is "kev-4b-merged/2"'),
]
ONE_REQUEST = json.dumps({"state": STATE, "questions": {"upsell": QUESTIONS["upsell"]}})


@pytest.mark.parametrize("edit,needle", NEWER, ids=[f"newer{i}" for i in range(len(NEWER))])
def test_bundle_from_a_newer_kev_refused_by_score(bundle, tmp_path, edit, needle):
    d = edited_bundle(bundle, tmp_path, edit)
    proc = run_kev("score", "--bundle", d, input=ONE_REQUEST, check=False)
    assert proc.returncode == 5 and proc.stdout == "", proc.stderr
    assert proc.stderr.startswith("kev score: ") and proc.stderr.count("\n") == 1, proc.stderr
    assert needle in proc.stderr and "kev_export.json" in proc.stderr, proc.stderr


def test_bundle_from_a_newer_kev_refused_by_serve_and_head(bundle, tmp_path):
    d = edited_bundle(bundle, tmp_path, set_field("option_isolation", True))
    proc = run_kev("serve", "--bundle", d, "--port", 0, check=False, timeout=120)
    assert proc.returncode == 5 and proc.stdout == "", proc.stderr
    assert "checkpoint_fields.option_isolation is true" in proc.stderr, proc.stderr
    with open(os.path.join(bundle, "config.json")) as f:
        hidden = json.load(f)["text_config"]["hidden_size"]
    request = json.dumps({"questions": [{"decide": [0.5] * hidden, "options": [[0.25] * hidden] * 2}]})
    proc = run_kev("head", "--bundle", d, input=request, check=False)
    assert proc.returncode == 5 and "checkpoint_fields.option_isolation is true" in proc.stderr, proc.stderr


def test_default_and_older_manifests_still_score_the_same(bundle, tmp_path):
    """A manifest with the supported values (bf16 included), or none of the new keys (an older
    kev's bundle), scores exactly as the bundle itself."""
    want = run_kev("score", "--bundle", bundle, input=ONE_REQUEST).stdout
    for i, edit in enumerate([set_field("weights_dtype", "bf16"),
                              lambda m: m.pop("checkpoint_fields")]):
        sub = tmp_path / str(i)
        sub.mkdir()
        d = edited_bundle(bundle, sub, edit)
        got = run_kev("score", "--bundle", d, input=ONE_REQUEST).stdout
        assert json.loads(got)["answers"] == json.loads(want)["answers"]


@pytest.mark.parametrize("edit,needle", NEWER[:1] + NEWER[-2:], ids=["field", "dtype", "format"])
def test_bundle_from_a_newer_kev_refused_by_forward(bundle, tmp_path, edit, needle):
    """kev forward loads the backbone only, but a bundle's fields may change the backbone's inputs
    (option isolation) or its arithmetic, so it is refused there too, before any output."""
    d = edited_bundle(bundle, tmp_path, edit)
    rows = tmp_path / "rows.json"
    rows.write_text(json.dumps({"rows": [{"ids": [1, 2, 3]}]}))
    out = tmp_path / "hidden.safetensors"
    proc = run_kev("forward", "--bundle", d, "--input", rows, "--output", out, check=False)
    assert proc.returncode == 5 and not out.exists(), proc.stderr
    assert needle in proc.stderr and "kev_export.json" in proc.stderr, proc.stderr
    # The unedited bundle runs (so the refusal above is the edit's doing).
    proc = run_kev("forward", "--bundle", bundle, "--input", rows, "--output", out, check=False)
    assert proc.returncode == 0 and out.exists(), proc.stderr
