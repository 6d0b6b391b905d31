"""`kev score` and `kev serve` decode every body with one decoder (kev/text/request_decoder.h), under
the same options: for each request, `kev score --jsonl` prints byte for byte the body `kev serve`
answers (latency_ms aside), refusals included ({"detail", "status"} against status + {"detail"}),
with date facts on (by flag, and by upstream's KEV_DATE_FACTS) and off."""
import json
import os
import re
import sys

import pytest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "pylib"))
from kevtest import ServeProcess, parse_responses, raw_exchange, run_kev, synth_bundle  # noqa: E402

MAX_STATE = 256
# Deterministic usage on both sides: no prefix cache (cached_tokens would depend on order).
FLAGS = ("--max-state", MAX_STATE, "--cache-entries", 0)
CHOICE = {"type": "choice", "instructions": "Which channel?", "criteria": {"email": None, "phone": "call"}}
NOUL = {"type": "noul", "instructions": "Will they churn?"}
STATES = [
    "Ordered 2024-02-28, paid February 29, 2024, shipped 2024-03-01.",
    {"order": {"placed": "2025-12-31", "due": "January 1, 2026"}, "note": "reminder 2026-01-02"},
    ["invoice 2025-12-31", {"due": "January 1, 2026"}, "2026-01-02", 7, None],
    "Old annotation 2026-01-01 and 2026-01-11\n\ndate_facts: stale",
    {"a": "2026-01-01", "date_facts": "stale", "b": "2026-01-03"},
    "No dates at all",
]
GOOD = [{"state": s, "questions": {"c": CHOICE, "n": NOUL}} for s in STATES]
GOOD.append({"model": "jev-latest", "state": STATES[0], "questions": {"n": NOUL}})
# Refused bodies, as JSON Lines lines (no newline inside).
BAD = [
    "{not json",
    '{"state": "s", "questions": {"a": {"type": "noul"}}',
    '{"state": {"n": 1e400}, "questions": {"a": {"type": "noul"}}}',
    '{"state": "s", "questions": {"a": {"type": "noul"}, "a": {"type": "noul"}}}',
    '{"state": "s", "questions": {}}',
    '{"questions": {"a": {"type": "noul"}}}',
    "[1, 2]",
    '{"state": "2026-01-01", "questions": {"a": {"type": "ranking"}}}',
    '{"state": ' + "[" * 100 + "]" * 100 + ', "questions": {"a": {"type": "noul"}}}',
]
LATENCY = re.compile(rb'"latency_ms":[-+0-9.eE]+')


@pytest.fixture(scope="module")
def bundle(tmp_path_factory):
    return synth_bundle(tmp_path_factory.mktemp("parity"), "--seed", 11)[1]


def served(server, body):
    """The raw (status, body bytes) `kev serve` answers for one body."""
    raw = (b"POST /v1/systemone HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nConnection: close\r\n"
           + b"Content-Length: %d\r\n\r\n" % len(body) + body)
    got, _ = raw_exchange(server.port, raw, timeout=60)
    [(status, _, payload)] = parse_responses(got)
    return status, payload


def scored(bundle, lines, *args, env=None):
    proc = run_kev("score", "--bundle", bundle, "--jsonl", *args, input="".join(l + "\n" for l in lines),
                   env=env, check=False)
    out = proc.stdout.encode().splitlines()
    assert len(out) == len(lines), proc.stderr
    return out


def check_parity(bundle, server, score_args=(), env=None):
    lines = [json.dumps(r) for r in GOOD] + BAD
    cli = scored(bundle, lines, *FLAGS, *score_args, env=env)
    for line, want in zip(lines, cli):
        status, body = served(server, line.encode())
        if status == 200:
            assert LATENCY.sub(b"", body) == LATENCY.sub(b"", want), line
            assert LATENCY.search(body) and LATENCY.search(want)
        else:
            refusal = json.loads(want)
            assert list(refusal) == ["detail", "status"] and refusal["status"] == status, (line, want)
            assert body == json.dumps({"detail": refusal["detail"]}, separators=(",", ":"),
                                      ensure_ascii=False).encode(), (line, body, want)
    return cli


def test_parity_with_date_facts(bundle):
    server = ServeProcess(bundle, *FLAGS, "--date-facts")
    try:
        with_facts = check_parity(bundle, server, ("--date-facts",))
        # The same through upstream's environment variable instead of the flag.
        check_parity(bundle, server, env={"KEV_DATE_FACTS": "1"})
    finally:
        server.close()
    # Date facts change what is scored: kev score without them answers differently.
    without = scored(bundle, [json.dumps(GOOD[0])], *FLAGS)
    assert LATENCY.sub(b"", without[0]) != LATENCY.sub(b"", with_facts[0])


def test_parity_without_date_facts(bundle):
    server = ServeProcess(bundle, *FLAGS)
    try:
        check_parity(bundle, server)
    finally:
        server.close()


def test_score_refuses_malformed_environment_as_serve_does(bundle):
    proc = run_kev("score", "--bundle", bundle, input="{}", env={"KEV_DATE_FACTS": "2"}, check=False)
    assert proc.returncode == 2 and proc.stdout == ""
    assert "KEV_DATE_FACTS" in proc.stderr and proc.stderr.count("\n") == 1


def test_single_request_refusal_says_what_serve_says(bundle):
    proc = run_kev("score", "--bundle", bundle, *FLAGS, input="{not json", check=False)
    assert proc.returncode == 2 and proc.stdout == ""
    server = ServeProcess(bundle, *FLAGS)
    try:
        status, body = served(server, b"{not json")
    finally:
        server.close()
    assert status == 400
    assert proc.stderr == "kev score: " + json.loads(body)["detail"] + "\n"
