"""A hostile-input campaign for the command line, through the real binary (docs: README "The
CLI", docs/acceptance.md). Commands and their options are read from `kev --help` and each
command's `--help`, so an option added later is covered without editing this file.

Every numeric option gets -1, 0, a huge value, nan, inf, an empty string and garbage; every text
or path option an empty string and a control character; the option parser's own refusals
(unknown option, missing value, repeated option, extra argument) are tried on every command; and
every file a command reads is given missing, empty, binary and truncated. Each run must end
within seconds with exit 2 (4 where a file cannot be read, as documented) and exactly one line
`kev <command>: ...` on stderr: never a crash, a hang, an unsigned wrap or a pass that should be
a fail. The reported cases of issue 30 are reproduced by name below."""
import json
import os
import re
import subprocess
import sys

import pytest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "pylib"))
from kevtest import KEV_BIN, SOURCE_DIR, run_kev, synth_bundle  # noqa: E402

BAD_INPUT, IO = 2, 4
TIMEOUT = 20  # seconds for one run; every refusal below is decided before any real work
TYPE = re.compile(r"^(UINT|INT|FLOAT|TEXT|NUMBER)\b")
EXAMPLE = os.path.join(SOURCE_DIR, "examples", "typed-decisions.jsonl")


def kev(*args, stdin=b"", timeout=TIMEOUT):
    """(exit code, stdout, stderr) of one run; a run past `timeout` fails the test."""
    proc = subprocess.run([KEV_BIN, *map(str, args)], input=stdin, capture_output=True,
                          timeout=timeout)
    return proc.returncode, proc.stdout.decode("utf-8", "replace"), proc.stderr.decode("utf-8", "replace")


def assert_refused(cmd, args, codes=(BAD_INPUT,), stdin=b"", mentions=None):
    rc, _, err = kev(cmd, *args, stdin=stdin) if cmd else kev(*args, stdin=stdin)
    lines = err.strip().splitlines()
    where = f"kev {cmd} {args!r}: rc {rc}, stderr {err!r}"
    assert rc in codes, where
    assert len(lines) == 1 and lines[0].startswith(f"kev {cmd}: " if cmd else "kev: "), where
    assert len(lines[0]) < 400 and not re.search(r"\d{25}", lines[0]), where  # no 309-digit bound
    if mentions:
        assert mentions in lines[0], where
    return lines[0]


def commands():
    rc, out, _ = kev("--help")
    assert rc == 0
    section = out.split("Subcommands:", 1)[1]
    return [line.split()[0] for line in section.splitlines() if line.startswith("  ") and line.split()]


def options_of(cmd):
    """[(name, type, positional)] for every option of `kev cmd` that takes a value."""
    rc, out, _ = kev(cmd, "--help")
    assert rc == 0, cmd
    found, section = [], None
    for line in out.splitlines():
        if line.endswith(":") and not line.startswith(" "):
            section = line[:-1]
            continue
        if not line.startswith("  ") or line.startswith("   ") or section not in ("Options", "Positionals"):
            continue
        parts = line.split()
        if len(parts) < 2 or not TYPE.match(parts[1]):
            continue  # a flag (no value)
        name = parts[0].split(",")[-1]
        found.append((name, TYPE.match(parts[1]).group(1), section == "Positionals"))
    return found


COMMANDS = commands()
NUMERIC = [(c, n, t) for c in COMMANDS for (n, t, pos) in options_of(c) if t != "TEXT" and not pos]
TEXTUAL = [(c, n) for c in COMMANDS for (n, t, pos) in options_of(c) if t == "TEXT" and not pos]


def test_every_command_is_found():
    assert {"bench", "calibrate", "compare", "cpu", "encode", "export", "forward", "head", "pin",
            "score", "serve", "synth", "tokenize", "verify"} <= set(COMMANDS)
    assert len(NUMERIC) >= 40 and len(TEXTUAL) >= 20, (len(NUMERIC), len(TEXTUAL))


# Values no count, size, fraction or budget accepts: each refused, whatever the option.
ALWAYS_BAD = ["nan", "NaN", "inf", "-inf", "", "abc", "1e999", "99999999999999999999999", "0x10", " 5", "5x"]


@pytest.mark.parametrize("cmd,name,kind", NUMERIC, ids=[f"{c}{n}" for c, n, _ in NUMERIC])
def test_numeric_option_refuses_hostile_values(cmd, name, kind):
    for value in ALWAYS_BAD:
        line = assert_refused(cmd, [name, value])
        assert line.startswith(f"kev {cmd}: {name} "), line
    if kind == "UINT":  # a count: -1 never wraps to 2^64 - 1
        assert_refused(cmd, [name, "-1"], mentions=f"{name} -1: must be a whole number")
        assert_refused(cmd, [name, "18446744073709551616"])
        assert_refused(cmd, [name, "1.5"])
    # 0, -1 (where allowed) and a huge valid-looking value: refused with one sentence, or taken
    # (the command then stops on its missing inputs): never a crash, a hang or a silent wrap.
    for value in ["0", "-1", "1e300", "4294967297"]:
        rc, _, err = kev(cmd, name, value)
        assert rc in (BAD_INPUT, IO), (cmd, name, value, rc, err)
        assert len(err.strip().splitlines()) == 1 and err.startswith(f"kev {cmd}: "), (cmd, name, value, err)


@pytest.mark.parametrize("cmd,name", TEXTUAL, ids=[f"{c}{n}" for c, n in TEXTUAL])
def test_text_option_refuses_empty_and_control_characters(cmd, name):
    for value in ["", "a\x01b", "x" * 5000]:
        line = assert_refused(cmd, [name, value])
        assert line.startswith(f"kev {cmd}: {name} "), line


@pytest.mark.parametrize("cmd", COMMANDS)
def test_parser_refusals_are_one_sentence_exit_2(cmd):
    assert_refused(cmd, ["--no-such-option"], mentions="--no-such-option: unknown option")
    assert_refused(cmd, ["--no-such-option=3"])
    assert_refused(cmd, ["stray1", "stray2", "stray3", "stray4"])
    for name, _, pos in options_of(cmd):
        if not pos:
            assert_refused(cmd, [name], mentions=f"{name}: needs a value")
            assert_refused(cmd, [name, "1", name, "2"])


@pytest.mark.parametrize("value", ["0", "-1", "abc", "2x", "1.5", " 2", "1025", "99999999999999999999"])
def test_malformed_kev_threads_is_refused(value):
    """KEV_THREADS is checked at start like the ISA variables: a value that is not a whole
    number from 1 to 1024 stops the command with one sentence naming it, before any work."""
    proc = subprocess.run([KEV_BIN, "cpu"], capture_output=True, text=True, timeout=TIMEOUT,
                          env={**os.environ, "KEV_THREADS": value})
    lines = proc.stderr.strip().splitlines()
    assert proc.returncode == BAD_INPUT, proc.stderr
    assert len(lines) == 1 and lines[0].startswith("kev cpu: KEV_THREADS="), proc.stderr


@pytest.mark.parametrize("value", ["1", "2", "1024", ""])
def test_well_formed_kev_threads_is_taken(value):
    proc = subprocess.run([KEV_BIN, "cpu"], capture_output=True, text=True, timeout=TIMEOUT,
                          env={**os.environ, "KEV_THREADS": value})
    assert proc.returncode == 0, proc.stderr


def test_top_level_refusals():
    assert_refused("", [], mentions="a command is required")
    assert_refused("", ["frobnicate"], mentions="unknown command")
    assert_refused("", ["--frob"])
    assert kev("--help")[0] == 0 and kev("compare", "--help")[0] == 0 and kev("--version")[0] == 0


# ---- files ----------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def env(tmp_path_factory):
    d = tmp_path_factory.mktemp("hostile")
    synth, bundle = synth_bundle(d, "--seed", 3)
    lines = open(EXAMPLE).read()
    results = run_kev("score", "--bundle", bundle, "--jsonl", input=lines).stdout
    files = {"results": d / "results.jsonl", "requests": d / "requests.jsonl",
             "logits": d / "logits.jsonl", "forward": d / "forward.json", "recipe": d / "recipe.json",
             "tokenizer": os.path.join(bundle, "tokenizer.json")}
    files["results"].write_text(results)
    files["requests"].write_text(lines)
    files["logits"].write_text('{"logits": [0.5, -1.0, 2.0], "label": 2}\n{"logits": [1.0, 0.0], "label": 0}\n')
    files["forward"].write_text('{"rows": [{"ids": [1, 2, 3]}]}')
    return {"dir": d, "synth": synth, "bundle": bundle, **files}


def hostile_files(directory, good):
    """name -> path: missing, empty, binary and truncated (the first half of a good file)."""
    data = open(good, "rb").read()
    out = {"missing": directory / "no-such-file"}
    for name, content in {"empty": b"", "binary": bytes(range(256)) * 8 + b"\x00\xff\xfe",
                          "truncated": data[: len(data) // 2 + 7]}.items():
        p = directory / f"{os.path.basename(good)}.{name}"
        p.write_bytes(content)
        out[name] = p
    return out


def file_cases(e):
    """(label, args with FILE for the file under attack, the good file, codes allowed)."""
    b = e["bundle"]
    return [
        ("compare-A", ["compare", "FILE", e["results"]], e["results"], (BAD_INPUT, IO)),
        ("compare-B", ["compare", e["results"], "FILE", "--max-flips", "0"], e["results"], (BAD_INPUT, IO)),
        ("bench-requests", ["bench", "FILE", "--bundle", b, "--warmup", "0", "--concurrency", "1", "--rounds", "1"],
         e["requests"], (BAD_INPUT, IO)),
        ("calibrate-logits", ["calibrate", "--logits", "FILE"], e["logits"], (BAD_INPUT, IO)),
        ("calibrate-labels", ["calibrate", "--bundle", b, "--labels", "FILE"], e["requests"], (BAD_INPUT, IO)),
        ("forward-input", ["forward", "--bundle", b, "--input", "FILE", "--output", e["dir"] / "out.st"],
         e["forward"], (BAD_INPUT, IO)),
        ("tokenize-tokenizer", ["tokenize", "--tokenizer", "FILE"], e["tokenizer"], (BAD_INPUT, IO)),
        ("encode-tokenizer", ["encode", "--tokenizer", "FILE"], e["tokenizer"], (BAD_INPUT, IO)),
        ("export-recipe", ["export", "--recipe", "FILE", "--base", e["synth"] + "/base", "--checkpoint",
                           e["synth"] + "/checkpoint", "--out", e["dir"] / "never"], None, (BAD_INPUT, IO, 3, 5)),
        ("serve-api-key-file", ["serve", "--bundle", b, "--port", "0", "--api-key-file", "FILE"], None,
         (BAD_INPUT, IO)),
    ]


def test_every_file_argument_refuses_missing_empty_binary_truncated(env, tmp_path):
    for label, args, good, codes in file_cases(env):
        if good is None:  # no good file of its own: any short JSON serves for truncation
            good = env["forward"]
        for kind, path in hostile_files(tmp_path, good).items():
            if label == "serve-api-key-file" and kind == "truncated":
                continue  # a truncated key file is a shorter key: valid
            full = [str(path) if a == "FILE" else a for a in args]
            stdin = open(EXAMPLE, "rb").read().splitlines()[0] if full[0] == "encode" else b""
            line = assert_refused(full[0], full[1:], codes=codes, stdin=stdin)
            assert label and line, (label, kind)
    assert not os.path.exists(env["dir"] / "never") and not os.path.exists(env["dir"] / "out.st")


def test_stdin_inputs_refuse_empty_binary_truncated(env):
    request = open(EXAMPLE, "rb").read().splitlines()[0]
    head_in = json.dumps({"questions": [{"decide": [0.0] * 4, "options": [[0.0] * 4]}]}).encode()
    cases = [("score", ["--bundle", env["bundle"]], request), ("encode", ["--tokenizer", env["tokenizer"]], request),
             ("head", ["--bundle", env["bundle"]], head_in),
             ("tokenize", ["--tokenizer", env["tokenizer"], "--decode"], b"[1, 2, 3]")]
    for cmd, args, good in cases:
        for data in (b"", bytes(range(256)), good[: len(good) // 2], b"NaN", b'{"a": 1e999}'):
            assert_refused(cmd, args, stdin=data)


# ---- the reported cases ---------------------------------------------------------------------


def flipped(env):
    """A copy of the results whose first choice question's argmax moves (one flip)."""
    recs = [json.loads(l) for l in open(env["results"]) if l.strip()]
    for r in recs:
        for a in r.get("answers", {}).values():
            if a["type"] == "choice" and len(a["probabilities"]) >= 2:
                keys = list(a["probabilities"])
                p = dict.fromkeys(keys, 0.0)
                p[min(keys, key=lambda k: a["probabilities"][k])] = 1.0
                a["probabilities"] = p
                path = env["dir"] / "flipped.jsonl"
                path.write_text("".join(json.dumps(x) + "\n" for x in recs))
                return path
    raise AssertionError("no choice question in the example")


def test_compare_gates_refuse_values_that_could_never_fail(env):
    a, b = env["results"], flipped(env)
    rc, out, _ = kev("compare", a, b, "--max-flips", "0")
    assert rc == 1 and "gate max-flips 0: FAIL (1)" in out  # the flip is real
    assert kev("compare", a, b, "--max-flips", "1")[0] == 0  # the exact boundary passes
    assert_refused("compare", [a, b, "--max-flips", "-1"], mentions="--max-flips -1: must be a whole number")
    assert_refused("compare", [a, b, "--max-flips-above-margin", "nan"], mentions="--max-flips-above-margin nan")
    assert_refused("compare", [a, b, "--max-flips-above-margin", "1.5"])
    assert_refused("compare", [a, b, "--max-probability-drift", "nan"])
    assert_refused("compare", [a, b, "--max-probability-drift", "1"])  # a drift is at most 1
    assert_refused("compare", [a, b, "--max-probability-drift", "-0.1"],
                   mentions="--max-probability-drift -0.1: must be a finite number from 0 up to (not including) 1")
    assert kev("compare", a, b, "--max-flips-above-margin", "0")[0] == 1
    assert kev("compare", a, a, "--max-probability-drift", "0")[0] == 0


def test_score_max_state_negative(env):
    assert_refused("score", ["--bundle", env["bundle"], "--max-state", "-5"],
                   mentions="--max-state -5: must be a whole number from 1 to")


@pytest.mark.parametrize("step", ["100", "0", "-64", "2048.0"])
def test_prefill_step_must_be_a_multiple_of_the_gdn_chunk(env, step):
    for cmd in ("score", "serve"):
        line = assert_refused(cmd, ["--bundle", env["bundle"], "--prefill-step", step],
                              mentions=f"--prefill-step {step}: must be a whole number from 64 to")
        assert line.endswith("a multiple of 64"), line


def test_bench_warmup_and_concurrency_cannot_wrap(env):
    r = env["requests"]
    # Refused before anything is sent: the URL has no server behind it.
    assert_refused("bench", [r, "--url", "http://127.0.0.1:9", "--warmup", "-1"], mentions="--warmup -1")
    assert_refused("bench", [r, "--url", "http://127.0.0.1:9", "--concurrency", "1,-4"],
                   mentions="--concurrency -4: must be a whole number from 1 to 1024")
    for url in ("http://127.0.0.1:abc", "http://127.0.0.1:70000", "http://:80", "ftp://x"):
        assert_refused("bench", [r, "--url", url], mentions=f"--url {url}: must look like")
    # Counts that multiply: bounded before work starts.
    big = env["dir"] / "big.jsonl"
    big.write_text(open(r).readline() * 1001)
    assert_refused("bench", [big, "--url", "http://127.0.0.1:9", "--rounds", "1000", "--concurrency", "1"],
                   mentions="at most 1000000")
    levels = ",".join(["1024"] * 65)
    assert_refused("bench", [r, "--url", "http://127.0.0.1:9", "--concurrency", levels], mentions="65 levels")
    many = ",".join(str(c) for c in range(1, 65))
    assert_refused("bench", [big, "--url", "http://127.0.0.1:9", "--rounds", "999", "--concurrency", many,
                             "--warmup", "1000000"], mentions="this run would send")


def test_result_file_lines_name_line_and_reason(env, tmp_path):
    good = open(env["results"]).read().splitlines()
    cases = {"nan": (good[0].replace('"noul": ', '"noul": NaN, "x": ', 1) if '"noul": ' in good[0]
                     else '{"answers": {"q": {"type": "noul", "noul": NaN}}}', "NaN and Infinity are not JSON numbers"),
             "overflow": ('{"answers": {"q": {"type": "noul", "noul": 1e999}}}', "1e999 (byte"),
             "truncated": (good[0][: len(good[0]) // 2], "byte "),
             "duplicate": ('{"answers": {"q": {"type": "noul", "noul": 0.5}}, "answers": 1}', 'duplicate key "answers"'),
             "utf8": ('{"detail": "a\xff"}', "UTF-8"),
             "range": ('{"answers": {"q": {"type": "noul", "noul": 1.5}}}', "answers.q.noul must be a probability")}
    for name, (line, reason) in cases.items():
        p = tmp_path / f"{name}.jsonl"
        data = ("\n".join(good[:2]) + "\n" + line).encode("latin-1" if name == "utf8" else "utf-8")
        p.write_bytes(data)
        msg = assert_refused("compare", [env["results"], p])
        assert f"{p} line 3: " in msg and reason in msg, (name, msg)
    for cut in ('{"answers": {"q": {"type": "noul", "noul": 0.5', '{"answers": {"q": {"type": "no'):
        (tmp_path / "cut.jsonl").write_text(cut)
        msg = assert_refused("compare", [env["results"], tmp_path / "cut.jsonl"])
        assert "line 1: the line is not valid JSON (byte " in msg, msg
        assert "unexpected end of input" in msg or "missing closing quote" in msg, msg
    msg = assert_refused("compare", [env["results"], tmp_path / "overflow.jsonl"])
    assert "not valid JSON" not in msg and "beyond the range of a double" in msg
    # No final newline is fine; blank lines are skipped; an empty file is refused.
    p = tmp_path / "nonl.jsonl"
    p.write_text("\n\n".join(good).rstrip("\n"))
    assert kev("compare", env["results"], p, "--max-flips", "0")[0] == 0
    (tmp_path / "empty.jsonl").write_text("\n \n")
    assert_refused("compare", [env["results"], tmp_path / "empty.jsonl"], mentions="no result record")


def test_compare_json_carries_every_figure_of_the_text(env, tmp_path):
    a, b = env["results"], flipped(env)
    out_json = tmp_path / "report.json"
    rc, text, _ = kev("compare", a, b, "--json", out_json)
    assert rc == 0
    s = json.loads(out_json.read_text())["summary"]
    # Independent: the figures from the questions' own rows (the documented definitions).
    qs = json.loads(out_json.read_text())["questions"]
    flips = [q for q in qs if q["flip"]]
    assert s["flips"] == len(flips) == 1
    assert s["largest_flip_margin"] == max(q["margin"] for q in flips)
    conf = [q["confidence_drift"] for q in qs if q["confidence_drift"] is not None]
    score = [q["score_drift"] for q in qs if q["score_drift"] is not None]
    assert s["confidence_drift_questions"] == len(conf) and s["score_drift_questions"] == len(score)
    assert abs(s["confidence_drift_mean"] - sum(conf) / len(conf)) < 1e-12
    assert abs(s["score_drift_mean"] - sum(score) / len(score)) < 1e-12
    m = re.search(r"largest reference margin among them: (\S+)\)", text)
    assert m and abs(float(m.group(1)) - s["largest_flip_margin"]) < 1e-5
    m = re.search(r"confidence drift: mean (\S+)", text)
    assert m and abs(float(m.group(1)) - s["confidence_drift_mean"]) < 1e-5 * max(1, s["confidence_drift_mean"])


def test_calibrate_says_when_t_is_not_determined(tmp_path):
    p = tmp_path / "one.jsonl"
    p.write_text('{"logits": [0.3], "label": 0}\n{"logits": [2.0, 2.0], "label": 1}\n')
    rc, out, err = kev("calibrate", "--logits", p, "--json", tmp_path / "c.json")
    assert rc == 0, err
    assert "does not depend on T" in out and "AT THE BOUND" not in out and "KEV_TEMPERATURE" not in out
    fit = json.loads((tmp_path / "c.json").read_text())["fit"]
    assert fit["determined"] is False and fit["at_bound"] is False
    assert_refused("calibrate", ["--logits", p, "--min-temperature", "5", "--max-temperature", "2"],
                   mentions="--min-temperature 5 must be below --max-temperature 2")
