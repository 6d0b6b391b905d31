"""`kev bench` against a real `kev serve` on 127.0.0.1 (never another address) and in-process:
its request and status accounting is checked against the server's own /metrics counters (parsed
with prometheus_client, an independent count of what arrived), the results file's records
against the passes the flags ask for, and its saved answers against `kev score` through
`kev compare`."""
import json
import os
import sys

import pytest
from prometheus_client import parser

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "pylib"))
from kevtest import SOURCE_DIR, ServeProcess, run_kev, synth_bundle  # noqa: E402

EXAMPLE = os.path.join(SOURCE_DIR, "examples", "typed-decisions.jsonl")
KEY = "bench-test-key"


@pytest.fixture(scope="module")
def bundle(tmp_path_factory):
    return synth_bundle(tmp_path_factory.mktemp("bench"), "--seed", 4)[1]


@pytest.fixture
def requests_file(tmp_path):
    """The example plus two requests the server must refuse with 422."""
    lines = open(EXAMPLE).read().splitlines()
    bad_type = {"id": "bad-type", "state": "s", "questions": {"q": {"type": "rank", "criteria": ["a"]}}}
    no_state = {"id": "no-state", "questions": {"q": {"type": "noul"}}}
    lines[3:3] = [json.dumps(bad_type)]
    lines.append(json.dumps(no_state))
    path = tmp_path / "requests.jsonl"
    path.write_text("\n".join(lines) + "\n")
    return path


def counts(port):
    import http.client
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    try:
        conn.request("GET", "/metrics")
        text = conn.getresponse().read().decode()
    finally:
        conn.close()
    out = {}
    for f in parser.text_string_to_metric_families(text):
        if f.name == "kev_http_requests":
            for s in f.samples:
                if s.labels.get("route") == "/v1/systemone":
                    out[int(s.labels["status"])] = int(s.value)
    return out


def read_results(path):
    lines = [json.loads(l) for l in open(path)]
    assert list(lines[0]) == ["kev_bench"] and list(lines[-1]) == ["kev_bench_summary"]
    return lines[0]["kev_bench"], lines[1:-1], lines[-1]["kev_bench_summary"]


def test_against_a_server_matches_its_metrics(bundle, requests_file, tmp_path, monkeypatch):
    monkeypatch.setenv("KEV_API_KEY", KEY)
    server = ServeProcess(bundle)
    try:
        before = counts(server.port)
        out, svg = tmp_path / "results.jsonl", tmp_path / "latency.svg"
        proc = run_kev("bench", requests_file, "--url", f"http://127.0.0.1:{server.port}", "--concurrency", "1,4",
                       "--warmup", "2", "--rounds", "1", "--out", out, "--svg", svg, check=False,
                       env={"KEV_API_KEY": KEY})
        after = counts(server.port)
    finally:
        server.close()
    assert proc.returncode == 1, proc.stdout + proc.stderr  # the 422s leave the run unranked
    n = 14
    sent = 2 + n + max(n, 2) + max(n, 8)
    diff = {s: after.get(s, 0) - before.get(s, 0) for s in set(after) | set(before)}
    assert sum(diff.values()) == sent
    assert diff.get(422, 0) == 3 * 2 and diff.get(200, 0) == sent - 6 and diff.get(401, 0) == 0

    meta, records, summary = read_results(out)
    assert meta["target"]["url"] == f"http://127.0.0.1:{server.port}"
    assert meta["target"]["server_models"]["models"][0]["name"] == "kev-latest"
    assert meta["kev_version"] and meta["client_cpu"]["kernels"]["gemm"] and meta["machine"]["cores"] >= 1
    assert KEY not in open(out).read()
    phases = [r["phase"] for r in records]
    assert phases.count("feasibility") == n and phases.count("c1") == n and phases.count("c4") == n
    feas = [r for r in records if r["phase"] == "feasibility"]
    assert [r["id"] for r in feas][:4] == ["td-001", "td-002", "td-003", "bad-type"]
    assert [r["status"] for r in feas].count(422) == 2
    levels = summary["levels"]
    assert [(l["phase"], l["concurrency"]) for l in levels] == [("feasibility", 1), ("measured", 1), ("measured", 4)]
    # The client's own accounting agrees with the server's (warm-ups are not in the table).
    assert sum(l["requests"] for l in levels) == sent - 2
    assert sum(l["ok"] for l in levels) == diff[200] - 2
    assert all(l["errors"] == {"422": 2} and not l["ranked"] for l in levels)
    for l in levels:
        assert 0 < l["p50_ms"] <= l["p95_ms"] <= l["p99_ms"] <= l["max_ms"]
        assert l["requests_per_s"] == pytest.approx(l["requests"] / l["wall_s"], rel=1e-9)
    assert "unranked" in proc.stdout and "422:2" in proc.stdout
    assert open(svg).read().startswith("<svg")

    # The saved answers are kev score's (same bundle, same rounding): zero drift, the two refusals
    # errors on both sides.
    scored = tmp_path / "scored.jsonl"
    scored.write_text(run_kev("score", "--bundle", bundle, "--jsonl", input=requests_file.read_text(),
                              check=False).stdout)
    report = tmp_path / "report.json"
    cmp = run_kev("compare", scored, out, "--max-probability-drift", "0", "--max-flips", "0", "--json", report)
    r = json.load(open(report))
    assert r["compared"] == 12 and r["errors_both"] == 2 and r["pass"], cmp.stdout


def test_without_the_key_every_request_is_401(bundle, tmp_path, monkeypatch):
    monkeypatch.setenv("KEV_API_KEY", KEY)
    server = ServeProcess(bundle)
    try:
        proc = run_kev("bench", EXAMPLE, "--url", f"http://127.0.0.1:{server.port}", "--concurrency", "2",
                       "--warmup", "0", "--rounds", "1", check=False, env={"KEV_API_KEY": ""})
        got = counts(server.port)
    finally:
        server.close()
    assert proc.returncode == 1 and "401:12" in proc.stdout, proc.stdout
    assert got.get(401, 0) == 24 and got.get(200, 0) == 0


def test_in_process(bundle, tmp_path):
    out = tmp_path / "results.jsonl"
    proc = run_kev("bench", EXAMPLE, "--bundle", bundle, "--concurrency", "1,3", "--warmup", "1", "--out", out,
                   "--threads", "1")
    meta, records, summary = read_results(out)
    assert meta["target"]["precision"] == "fp32" and meta["target"]["bundle_digest"].startswith("sha256:")
    assert [l["requests"] for l in summary["levels"]] == [12, 24, 24]
    assert all(l["ranked"] and l["ok"] == l["requests"] for l in summary["levels"])
    assert len(records) == 12 + 24 + 24
    assert "unranked" not in proc.stdout


def test_refusals(bundle, tmp_path):
    proc = run_kev("bench", EXAMPLE, check=False)
    assert proc.returncode == 2 and "either --url" in proc.stderr
    proc = run_kev("bench", EXAMPLE, "--url", "ftp://127.0.0.1:1", check=False)
    assert proc.returncode == 2 and "http://HOST:PORT" in proc.stderr
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"state": "s"}\n[1, 2]\n')
    proc = run_kev("bench", bad, "--bundle", bundle, check=False)
    assert proc.returncode == 2 and "line 2" in proc.stderr
    # Nothing listening: every request is counted as "no answer", none hangs.
    proc = run_kev("bench", EXAMPLE, "--url", "http://127.0.0.1:9", "--concurrency", "1", "--warmup", "0",
                   "--rounds", "1", check=False, timeout=120)
    assert proc.returncode == 1 and "no-answer:12" in proc.stdout, proc.stdout


def stderr_on_a_terminal(args):
    """(exit status, bytes written to stderr) of a run whose stderr is a pseudo-terminal."""
    import pty
    import subprocess
    master, slave = pty.openpty()
    try:
        p = subprocess.run(args, stdout=subprocess.PIPE, stderr=slave, timeout=300)
    finally:
        os.close(slave)
    err = b""
    try:
        while chunk := os.read(master, 65536):
            err += chunk
    except OSError:  # EIO once the terminal's other side is closed and drained
        pass
    finally:
        os.close(master)
    return p.returncode, err


def test_progress_line_only_on_a_terminal(bundle):
    from kevtest import KEV_BIN
    args = [KEV_BIN, "bench", EXAMPLE, "--bundle", bundle, "--concurrency", "2", "--warmup", "0", "--rounds", "1",
            "--threads", "1"]
    assert run_kev(*args[1:]).stderr == ""  # a pipe: no progress line
    rc, err = stderr_on_a_terminal(args)
    assert rc == 0 and b"\rfeasibility: 12/12 requests" in err and b"concurrency 2: 12/12 requests" in err, err
    rc, err = stderr_on_a_terminal(args + ["--quiet"])
    assert rc == 0 and b"requests" not in err, err
