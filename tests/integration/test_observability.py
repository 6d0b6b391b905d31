"""`kev serve` observability through the real binary: GET /metrics parsed with the Prometheus
client's own exposition parser (python3-prometheus-client, prometheus_client.parser) and checked
against what the test did (counters moved by exactly the requests sent, cache hits/misses/
evictions, token sums equal to the responses' usage, histograms cumulative with _count equal to
the requests), bounded labels (no raw path ever becomes a label), /metrics answered while loading;
and the JSON request log (--log-format json): one valid JSON object per request whatever the
client sent, with its request id (the client's x-typesafe-request-id, else a generated uuid hex).

Every server is started with --port 0 on 127.0.0.1 and always killed in teardown."""
import json
import os
import re
import signal
import sys
import time

import pytest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "pylib"))
from kevtest import ServeProcess, fifo_bundle, free_port, raw_exchange, synth_bundle  # noqa: E402

parser = pytest.importorskip("prometheus_client.parser",
                             reason="python3-prometheus-client is not installed (scripts/setup.sh)")

STATE_A = {"customer": "Ada", "cart": ["tea", "scones"]}
STATE_B = "a different state " * 3
QUESTIONS = {
    "next": {"type": "choice", "instructions": "Next step?", "criteria": {"ship": "confirm", "refund": None}},
    "upsell": {"type": "noul", "instructions": "Offer a discount?"},
    "mood": {"type": "score", "instructions": "Satisfaction", "criteria": ["angry", "neutral", "happy"]},
}
REQ_A = {"state": STATE_A, "questions": QUESTIONS}
REQ_B = {"state": STATE_B, "questions": {"next": QUESTIONS["next"]}}
CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"


@pytest.fixture(scope="module")
def bundle(tmp_path_factory):
    return synth_bundle(tmp_path_factory.mktemp("obs"), "--seed", 7)[1]


def scrape(server):
    """(raw text, {family name: Metric}) of GET /metrics, parsed by prometheus_client."""
    import http.client
    conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=30)
    try:
        conn.request("GET", "/metrics")
        r = conn.getresponse()
        text = r.read().decode("utf-8")
        assert r.status == 200, text
        assert r.getheader("Content-Type") == CONTENT_TYPE
    finally:
        conn.close()
    families = {f.name: f for f in parser.text_string_to_metric_families(text)}
    return text, families


def value(families, family, sample=None, **labels):
    """The value of the one sample of `family` named `sample` (default: the family) with these labels;
    0 when there is none (a counter never incremented is not exposed)."""
    names = {sample} if sample else {family, family + "_total"}  # the parser drops a counter's _total
    found = [s.value for s in families[family].samples
             if s.name in names and all(s.labels.get(k) == v for k, v in labels.items())]
    assert len(found) <= 1, (family, sample, labels, found)
    return found[0] if found else 0


def histogram(families, family, **labels):
    """(buckets [(le, cumulative)], sum, count) of one histogram series."""
    f = families[family]
    assert f.type == "histogram", f.type
    match = lambda s: all(s.labels.get(k) == v for k, v in labels.items())
    buckets = [(float(s.labels["le"]), s.value) for s in f.samples if s.name == family + "_bucket" and match(s)]
    (total,) = [s.value for s in f.samples if s.name == family + "_sum" and match(s)]
    (count,) = [s.value for s in f.samples if s.name == family + "_count" and match(s)]
    les = [le for le, _ in buckets]
    assert les == sorted(les) and les[-1] == float("inf"), les
    counts = [c for _, c in buckets]
    assert counts == sorted(counts), f"{family} buckets are not cumulative: {buckets}"
    assert counts[-1] == count, (family, buckets, count)
    return buckets, total, count


def test_metrics_count_exactly_what_was_done(bundle):
    # One cache entry: A (miss), A (hit), A (hit), B (miss, evicts A), A (miss, evicts B).
    s = ServeProcess(bundle, "--cache-entries", 1, "--max-state", 256, "--usage-details")
    try:
        text0, before = scrape(s)
        assert value(before, "kev_http_requests", "kev_http_requests_total", route="/v1/systemone") == 0
        usages = []
        for req in (REQ_A, REQ_A, REQ_A, REQ_B, REQ_A):
            status, _, body = s.score(req)
            assert status == 200, body
            usages.append(body["usage"])
        assert [u["cached_tokens"] > 0 for u in usages] == [False, True, True, False, False]
        assert s.score({"state": "x"})[0] == 422  # no questions: refused by the worker, not scored
        for path in ("/missing", "/secret-raw-path-xyz?token=abc", "/%ff%0d%0a"):
            assert s.request("GET", path)[0] == 404
        assert s.request("PUT", "/health")[0] == 405
        assert s.request("GET", "/health")[0] == 200

        text, m = scrape(s)
        req = lambda **kw: value(m, "kev_http_requests", "kev_http_requests_total", **kw)
        assert req(route="/v1/systemone", status="200") == 5
        assert req(route="/v1/systemone", status="422") == 1
        assert req(route="other", status="404") == 3
        assert req(route="/health", status="405") == 1
        assert req(route="/health", status="200") == 1
        assert req(route="/metrics", status="200") == 1  # the first scrape; this one is not yet counted
        # Bounded labels: nothing the client sent is a label value.
        routes = {smp.labels["route"] for smp in m["kev_http_requests"].samples}
        assert routes <= {"/v1/systemone", "/v1/systemone/permute", "/v1/systemone/separate", "/health", "/health/live", "/health/ready", "/v1/models",
                          "/metrics", "/openapi.json", "other"}, routes
        assert "secret-raw-path" not in text and "token=abc" not in text

        _, _, count = histogram(m, "kev_http_request_duration_seconds", route="/v1/systemone")
        assert count == 6
        _, _, count = histogram(m, "kev_http_request_duration_seconds", route="other")
        assert count == 3
        _, waited, count = histogram(m, "kev_queue_wait_seconds")
        assert count == 6 and waited >= 0  # every POST waited for a slot, the 422 too
        buckets, total, count = histogram(m, "kev_batch_size")
        assert count == 5 and total == 5 and buckets[0] == (1.0, 5)  # one request per model pass

        # Tokens: the histograms' sums are exactly the responses' usage.
        _, state_sum, count = histogram(m, "kev_request_state_tokens")
        assert count == 5 and state_sum == sum(u["state_tokens"] for u in usages)
        _, row_sum, count = histogram(m, "kev_request_row_tokens")
        assert count == 5 and row_sum == sum(u["input_tokens"] - u["state_tokens"] for u in usages)
        assert value(m, "kev_cached_state_tokens") == sum(u["cached_tokens"] for u in usages)
        assert value(m, "kev_questions") == 3 * 4 + 1
        assert value(m, "kev_scored_requests", "kev_scored_requests_total", prefix="cached") == 2
        assert value(m, "kev_scored_requests", "kev_scored_requests_total", prefix="computed") == 3

        # Prefix cache, as /health reports it too.
        assert value(m, "kev_prefix_cache_hits") == 2
        assert value(m, "kev_prefix_cache_misses") == 3
        assert value(m, "kev_prefix_cache_evictions") == 2
        assert value(m, "kev_prefix_cache_entries") == 1
        health = s.request("GET", "/health")[2]
        assert health["cache"]["hits"] == 2 and health["cache"]["misses"] == 3

        # Gauges and facts.
        assert value(m, "kev_inflight_requests") == 0 and value(m, "kev_queue_depth") == 0
        assert value(m, "kev_open_connections") >= 1  # this scrape's own
        assert value(m, "kev_ready") == 1
        assert value(m, "kev_lifecycle", state="ready") == 1 and value(m, "kev_lifecycle", state="loading") == 0
        assert 0 < value(m, "kev_model_load_seconds") < 600
        (info,) = m["kev_build_info"].samples
        assert info.value == 1 and info.labels["isa"] in ("portable", "avx2", "avx512")
        assert re.fullmatch(r"\d+\.\d+\.\d+", info.labels["version"])
        assert abs(value(m, "process_start_time_seconds") - time.time()) < 600
        assert value(m, "process_resident_memory_bytes") > 0
    finally:
        s.close()


def test_metrics_answer_while_loading(bundle, tmp_path):
    # A bundle whose manifest is a FIFO: loading blocks on it until the test opens it.
    slow = fifo_bundle(bundle, tmp_path)
    s = ServeProcess(str(slow), port=free_port(), wait_listening=False)
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                _, m = scrape(s)
                break
            except OSError:
                assert time.monotonic() < deadline, s.stderr()
                time.sleep(0.05)
        assert value(m, "kev_ready") == 0 and value(m, "kev_lifecycle", state="loading") == 1
        assert "kev_model_load_seconds" not in m and "kev_prefix_cache_hits" not in m
        with open(slow / "kev_export.json", "w"):
            pass
        assert s.proc.wait(timeout=30) != 0
    finally:
        s.close()


def test_refused_connections_are_counted_under_other(bundle):
    import socket
    s = ServeProcess(bundle, "--max-connections", 1)
    try:
        with socket.create_connection(("127.0.0.1", s.port), timeout=10):
            time.sleep(0.3)  # accepted first: the next connection is over the cap
            out, _ = raw_exchange(s.port, b"GET /v1/systemone HTTP/1.1\r\nHost: a\r\n\r\n")
            assert out.startswith(b"HTTP/1.1 503"), out[:100]
        deadline = time.monotonic() + 10
        while True:  # the holder's close is seen by the server before the scrape is accepted
            try:
                _, m = scrape(s)
                break
            except (OSError, AssertionError):
                assert time.monotonic() < deadline
                time.sleep(0.05)
        assert value(m, "kev_http_requests", "kev_http_requests_total", route="other", status="503") >= 1
        assert value(m, "kev_http_requests", "kev_http_requests_total", route="/v1/systemone") == 0
    finally:
        s.close()


def stop_and_log(s):
    s.proc.send_signal(signal.SIGTERM)
    s.proc.wait(timeout=60)
    log = s.stderr()
    s.close()
    return log


def test_json_request_log(bundle):
    s = ServeProcess(bundle, "--log-format", "json", "--max-state", 256, "--usage-details")
    sent = 0
    try:
        status, first_headers, _ = s.score(REQ_A)
        assert status == 200
        status, _, body = s.request("POST", "/v1/systemone", REQ_A,
                                    {"Content-Type": "application/json", "x-typesafe-request-id": "client-id-42"})
        assert status == 200 and body["usage"]["cached_tokens"] > 0
        assert s.request("GET", "/health", headers={"x-typesafe-request-id": "x" * 129})[0] == 200
        sent = 3
        # Hostile request lines: raw bytes, escapes and quotes in the path; a request that never parses.
        for raw in (b"GET /\xff\x1b[31m\"quote\\back HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n",
                    b"GET /%ff%0d%0a%1b HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n",
                    b"\x16\x03\x01garbage\r\n\r\n"):
            out, _ = raw_exchange(s.port, raw)
            assert out.startswith(b"HTTP/1.1 4"), out[:100]
            sent += 1
    finally:
        log = stop_and_log(s)
    lines = [l for l in log.splitlines() if l.startswith("{")]
    entries = [json.loads(l) for l in lines]  # every line is valid JSON
    assert len(entries) == sent, log
    for e in entries:
        assert set(e) == {"ts", "request_id", "method", "path", "route", "status", "duration_ms", "queue_ms",
                          "input_tokens", "state_tokens", "row_tokens", "cached", "truncated", "questions",
                          "batch"}, e
        assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z", e["ts"])
        assert e["duration_ms"] >= 0
        for field in ("method", "path"):  # printable ASCII only, whatever was sent
            assert e[field] is None or re.fullmatch(r"[\x21-\x7e]+", e[field]), e
    first, second, health = entries[:3]
    assert re.fullmatch(r"[0-9a-f]{32}", first["request_id"]) and first["request_id"][12] == "4"
    assert first["request_id"] == first_headers["x-typesafe-request-id"]  # the id the client was given
    assert second["request_id"] == "client-id-42"
    assert re.fullmatch(r"[0-9a-f]{32}", health["request_id"])  # an unusable client id is replaced
    assert first["method"] == "POST" and first["path"] == "/v1/systemone" and first["status"] == 200
    assert first["cached"] is False and second["cached"] is True and first["batch"] == 1
    assert first["queue_ms"] >= 0 and first["questions"] == 3
    assert first["input_tokens"] == first["state_tokens"] + first["row_tokens"] > 0
    assert health["route"] == "/health" and health["queue_ms"] is None and health["cached"] is None
    hostile = entries[3:]
    assert all(e["route"] == "other" for e in hostile)
    assert len({e["request_id"] for e in entries}) == len(entries)
    assert not any(l.startswith("kev serve: GET") or l.startswith("kev serve: POST") for l in log.splitlines())


def test_json_log_stays_valid_under_mutated_requests(bundle):
    """Seeded byte-level mutations of valid requests (as test_serve_hostile's): every stderr line
    is either a lifecycle line or a JSON object with every field."""
    import random
    rng = random.Random(1130)
    body = json.dumps(REQ_B).encode()
    seeds = [b"POST /v1/systemone HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\n%s" % (len(body), body),
             b"GET /health?x=\"\\ HTTP/1.1\r\nHost: x\r\nx-typesafe-request-id: a\"b\\c\r\n\r\n"]
    s = ServeProcess(bundle, "--log-format", "json", "--request-timeout", 2, "--max-state", 256)
    try:
        for _ in range(120):
            data = bytearray(rng.choice(seeds))
            for _ in range(rng.randint(1, 4)):
                op, at = rng.randrange(4), rng.randrange(len(data))
                if op == 0:
                    data[at] ^= 1 << rng.randrange(8)
                elif op == 1:
                    data[at:at] = rng.choice([b"\r", b"\n", b"\0", b"\xff", b"\x1b", b" ", b"\"", b"\\", b"%"])
                elif op == 2:
                    del data[at:at + rng.randint(1, 8)]
                else:
                    data[at:at] = data[at:at + rng.randint(1, 16)]
            raw_exchange(s.port, bytes(data), timeout=5, half_close=True)
    finally:
        log = stop_and_log(s)
    entries = 0
    for line in log.splitlines():
        if line.startswith("kev serve: "):
            assert "GET" not in line and "POST" not in line, line
            continue
        e = json.loads(line)
        assert {"ts", "request_id", "method", "path", "route", "status", "duration_ms"} <= set(e), e
        entries += 1
    assert entries >= 60, log[-2000:]


def test_text_log_is_the_default_and_quiet_silences_both(bundle):
    s = ServeProcess(bundle)
    try:
        assert s.request("GET", "/health/live")[0] == 200
    finally:
        log = stop_and_log(s)
    assert any(l.startswith("kev serve: GET /health/live 200 ") for l in log.splitlines()), log
    s = ServeProcess(bundle, "--quiet", "--log-format", "json")
    try:
        assert s.request("GET", "/health")[0] == 200
    finally:
        log = stop_and_log(s)
    assert "/health" not in log and "{" not in log
