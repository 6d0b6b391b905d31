"""`--jsonl` commands driven as co-processes: `kev tokenize --jsonl` and `kev score --jsonl` each
write (and flush) the answer to an input line as soon as that line is read, so a caller can send
one line, read its answer, and only then send the next, on pipes, without closing stdin.

Every answer is read before the next line is written, under a deadline: a command that holds its
output until the end of its input fails here instead of hanging. The ids are checked against
transformers.js (tests/oracle/js/tokenize.cjs, when scripts/setup.sh installed it) and always
against `kev tokenize` without --jsonl on each text alone (the same ids, byte for byte).
"""
import json
import os
import selectors
import subprocess
import sys
import time

import pytest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "pylib"))
import kevtest  # noqa: E402
from kevtest import KEV_BIN, run_kev, synth_bundle  # noqa: E402

JS = os.path.join(kevtest.SOURCE_DIR, "tests", "oracle", "js")
# Generous for a loaded machine; an answer held until stdin closes never comes at all.
ANSWER_TIMEOUT = 30

TEXTS = [
    "Hello, world!",
    "  leading spaces,\ttabs and a line\nbreak",
    "naïve café — 日本語 🙂",
    "<|im_start|>user\nRefund?<|im_end|>",
    "",
    "12345 and 3.14159",
]


class CoProcess:
    """A kev command on pipes: ask() writes one line and returns the one line it answers."""

    def __init__(self, *args):
        self.proc = subprocess.Popen([KEV_BIN, *map(str, args)], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     stderr=subprocess.PIPE, bufsize=0)
        self.selector = selectors.DefaultSelector()
        self.selector.register(self.proc.stdout, selectors.EVENT_READ)
        self.pending = b""
        self.asked = 0

    def ask(self, line):
        self.asked += 1
        self.proc.stdin.write(line.encode() + b"\n")
        self.proc.stdin.flush()
        deadline = time.monotonic() + ANSWER_TIMEOUT
        while b"\n" not in self.pending:
            left = deadline - time.monotonic()
            if left <= 0 or not self.selector.select(left):
                self.proc.kill()
                pytest.fail(f"no answer to line {self.asked} within {ANSWER_TIMEOUT} s with stdin still open: "
                            "the command holds its output instead of answering line by line")
            chunk = os.read(self.proc.stdout.fileno(), 65536)
            if not chunk:
                self.proc.wait(timeout=ANSWER_TIMEOUT)
                pytest.fail(f"exit {self.proc.returncode} before answering line {self.asked}: "
                            f"{self.proc.stderr.read().decode()}")
            self.pending += chunk
        answer, _, self.pending = self.pending.partition(b"\n")
        # One answer per line, and none ahead of its question.
        assert self.pending == b"", f"more than one line answered line {self.asked}: {self.pending!r}"
        return answer.decode()

    def close(self):
        """Closes stdin; returns (exit status, what came after the last answer, stderr)."""
        self.proc.stdin.close()
        rest = self.pending + self.proc.stdout.read()
        err = self.proc.stderr.read()
        return self.proc.wait(timeout=ANSWER_TIMEOUT), rest, err.decode()


@pytest.fixture(scope="module")
def tokenizer(tmp_path_factory):
    """The tokenizer.json `kev synth` writes (a small real byte-level BPE with Qwen's special
    tokens)."""
    synth = tmp_path_factory.mktemp("tokenizer") / "synth"
    run_kev("synth", "--out", synth, "--quiet", "--seed", 5)
    return str(synth / "base" / "tokenizer.json")


@pytest.fixture(scope="module")
def bundle(tmp_path_factory):
    # The default synth shape is tiny at the 4B/9B depth: --model names the member.
    return synth_bundle(tmp_path_factory.mktemp("score"), "--seed", 5, pin_args=("--model", "kev-4b"))[1]


def js_oracle(tokenizer, texts, special):
    cmd = ["node", os.path.join(JS, "tokenize.cjs"), "--tokenizer", tokenizer] + ([] if special else ["--no-added"])
    lines = "".join(json.dumps(t, ensure_ascii=False) + "\n" for t in texts)
    out = subprocess.run(cmd, input=lines.encode(), capture_output=True, check=True, timeout=300).stdout
    return [json.loads(l) for l in out.decode().splitlines()]


@pytest.mark.parametrize("special", [False, True])
def test_tokenize_jsonl_answers_each_line_before_the_next(tokenizer, special):
    flags = ["--special"] if special else []
    kev = CoProcess("tokenize", "--tokenizer", tokenizer, "--jsonl", *flags)
    try:
        answers = [kev.ask(json.dumps(t, ensure_ascii=False)) for t in TEXTS]
    finally:
        status, rest, err = kev.close()
    assert (status, rest, err) == (0, b"", "")
    # The same bytes as the whole-stdin mode gives for each text alone.
    alone = [run_kev("tokenize", "--tokenizer", tokenizer, *flags, input=t).stdout for t in TEXTS]
    assert [f'{{"ids":{a}}}\n' for a in answers] == alone
    ids = [json.loads(a) for a in answers]
    assert any(ids) and ids[TEXTS.index("")] == []
    if kevtest.npm_oracle_available():
        assert ids == js_oracle(tokenizer, TEXTS, special)


def test_tokenize_jsonl_answers_before_a_bad_line_is_refused(tokenizer):
    """Lines before a refused one were already answered (and read) on the pipe."""
    kev = CoProcess("tokenize", "--tokenizer", tokenizer, "--jsonl")
    first = kev.ask(json.dumps("first"))
    assert json.loads(first) == json.loads(run_kev("tokenize", "--tokenizer", tokenizer, input="first").stdout)["ids"]
    kev.proc.stdin.write(b"not json\n")
    status, rest, err = kev.close()
    assert status == 2 and rest == b""
    assert "stdin line 2 is not a JSON string" in err


def test_score_jsonl_answers_each_line_before_the_next(bundle):
    requests = [
        {"state": {"order": 7, "note": "late twice"},
         "questions": {"next": {"type": "choice", "instructions": "What next?",
                                "criteria": {"ship": "ship it", "wait": "wait"}}}},
        "not a request",
        {"state": "a second state", "questions": {"vip": {"type": "noul", "instructions": "A VIP?"}}},
    ]
    lines = [r if isinstance(r, str) else json.dumps(r) for r in requests]
    kev = CoProcess("score", "--bundle", bundle, "--jsonl")
    try:
        answers = [json.loads(kev.ask(line)) for line in lines]
    finally:
        status, rest, err = kev.close()
    assert status == 2 and rest == b""  # the bad line's status; every line answered
    assert answers[1]["status"] == 400 and "detail" in answers[1]  # not JSON
    for line, answer in zip(lines[::2], answers[::2]):
        alone = json.loads(run_kev("score", "--bundle", bundle, input=line).stdout)
        answer.pop("latency_ms", None)
        alone.pop("latency_ms", None)
        assert answer == alone
