"""`kev serve` through the real binary over loopback HTTP: answers equal `kev score` on the same
requests, /health and /v1/models shapes, every error status with {"detail"}, 503 admission under
overload (nothing lost), concurrent correctness, and SIGTERM letting an in-flight request finish.

Every server is started with --port 0 on 127.0.0.1 and always killed in teardown; every loop is
bounded in count and time."""
import json
import os
import signal
import sys
import threading
import time

import pytest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "pylib"))
from kevtest import ServeProcess, run_kev, synth_bundle  # noqa: E402

STATE = {"customer": "Ada", "cart": ["tea", "scones"], "note": "asked about delivery"}
QUESTIONS = {
    "next": {"type": "choice", "instructions": "Next step?", "criteria": {"ship": "confirm", "refund": None, "wait": ""}},
    "upsell": {"type": "noul", "instructions": "Offer a discount?"},
    "mood": {"type": "score", "instructions": "Satisfaction", "criteria": ["angry", "neutral", "happy", "delighted"]},
}
REQUESTS = [
    {"state": STATE, "questions": QUESTIONS},
    {"model": "kev-latest", "state": "plain text state", "questions": {"q": QUESTIONS["next"]}},
    {"state": ["a", {"b": 1.5, "c": True}], "questions": {"m": QUESTIONS["mood"], "u": QUESTIONS["upsell"]}},
    {"state": None, "questions": {"only": {"type": "choice", "instructions": "", "criteria": {"x": None}}}},
    {"state": "word " * 40, "questions": QUESTIONS},
]
MAX_STATE = "256"  # the main server and `kev score` share it; a longer state is a 422


@pytest.fixture(scope="module")
def bundle(tmp_path_factory):
    return synth_bundle(tmp_path_factory.mktemp("serve"), "--seed", 5)[1]


@pytest.fixture(scope="module")
def model_name(bundle):
    with open(os.path.join(bundle, "kev_export.json")) as f:
        return json.load(f)["model"]


def Server(bundle, *args):
    return ServeProcess(bundle, *args)


@pytest.fixture(scope="module")
def server(bundle):
    s = Server(bundle, "--max-state", MAX_STATE, "--max-inflight", 4, "--max-queue", 64, "--max-body", 65536)
    try:
        yield s
    finally:
        s.close()


def kev_score(bundle, reqs, *extra):
    text = "".join(json.dumps(r) + "\n" for r in reqs)
    proc = run_kev("score", "--bundle", bundle, "--jsonl", *extra, input=text)
    return [json.loads(line) for line in proc.stdout.splitlines()]


def test_answers_equal_kev_score(bundle, server):
    expected = kev_score(bundle, REQUESTS, "--max-state", MAX_STATE)
    assert len(expected) == len(REQUESTS)
    for req, want in zip(REQUESTS, expected):
        status, hdrs, got = server.score(req)
        assert status == 200, got
        assert hdrs["content-type"].startswith("application/json")
        assert set(got) == {"model", "answers", "usage", "latency_ms"}
        assert got["model"] == req.get("model", "kev-latest")
        assert got["answers"] == want["answers"]
        assert got["usage"]["input_tokens"] == want["usage"]["input_tokens"]
        assert list(got["usage"]) == list(want["usage"]) == ["input_tokens", "output_tokens"]  # Kev 1.0's usage
        assert got["usage"]["output_tokens"] == want["usage"]["output_tokens"] > 0


def test_model_name_and_alias(bundle, server, model_name):
    status, _, named = server.score({"model": model_name, **REQUESTS[0]})
    assert status == 200 and named["model"] == model_name
    status, _, alias = server.score(REQUESTS[0])
    assert status == 200 and alias["answers"] == named["answers"]
    # Any other name too, echoed (upstream accepts any string; test_serve_compat.py has more).
    status, _, other = server.score({"model": "gpt-4", **REQUESTS[0]})
    assert status == 200 and other["model"] == "gpt-4" and other["answers"] == named["answers"]


def test_health_and_models(server, model_name):
    assert server.listening["model"] == model_name
    assert server.score(REQUESTS[1])[0] == 200
    status, hdrs, health = server.request("GET", "/health")
    assert status == 200 and hdrs["content-type"].startswith("application/json")
    assert list(health) == ["status", "ready", "model", "inflight", "queued", "temperature", "cache", "state_dir",
                            "batches", "memory"]
    assert health["state_dir"] is None  # no --state-dir (test_state_dir.py: its counts)
    assert health["status"] == "ok" and health["ready"] is True and health["model"] == model_name
    assert health["inflight"] == 0 and health["queued"] == 0
    cache = health["cache"]
    assert set(cache) == {"entries", "tokens", "hits", "misses", "bytes", "max_bytes", "reused_tokens",
                          "computed_tokens"}
    assert all(isinstance(v, int) for v in cache.values())
    assert cache["entries"] >= 1 and cache["tokens"] > 0 and cache["misses"] >= 1
    batches = health["batches"]
    assert set(batches) == {"max_batch", "passes", "requests", "largest"}
    assert batches["max_batch"] == 8 and batches["passes"] >= 1 and batches["requests"] >= batches["passes"]
    # The default memory budget: half the machine's memory (the cgroup's limit when lower) less the
    # default --cache-bytes (2 GiB), at least 256 MiB (docs/serving.md "Memory of long states").
    with open("/proc/meminfo") as f:
        total = next(int(l.split()[1]) * 1024 for l in f if l.startswith("MemTotal:"))
    try:
        with open("/sys/fs/cgroup/memory.max") as f:
            limit = f.read().strip()
        if limit.isdigit() and int(limit) < total:
            total = int(limit)
    except OSError:
        pass
    expected = total // 2 - (2 << 30) if total // 2 > (2 << 30) + (256 << 20) else 256 << 20
    assert health["memory"] == {"budget": expected, "reserved": 0, "waiting": 0}, health["memory"]
    # The same state again is a cache hit.
    assert server.score(REQUESTS[1])[0] == 200
    assert server.request("GET", "/health")[2]["cache"]["hits"] > cache["hits"]

    status, _, models = server.request("GET", "/v1/models")
    assert status == 200
    assert [m["name"] for m in models["models"]] == ["kev-latest", "jev-latest"]
    assert all(m["bundle_model"] == model_name for m in models["models"])


ERRORS = [
    ("POST", "/v1/systemone", "{not json", 400, "JSON"),
    ("POST", "/v1/systemone", '{"state": "s", "questions": {"a": 1}', 400, "JSON"),
    ("POST", "/v1/systemone", "", 400, "JSON"),
    ("POST", "/v1/systemone", json.dumps({"state": "s", "questions": {"a": {"type": "ranking", "criteria": ["x"]}}}), 422, "type"),
    ("POST", "/v1/systemone", json.dumps({"state": "s", "questions": {}}), 422, "question"),
    ("POST", "/v1/systemone", json.dumps({"questions": {"a": {"type": "noul"}}}), 422, "state"),
    ("POST", "/v1/systemone", '{"state": "s", "state": "t", "questions": {"a": {"type": "noul"}}}', 422, "state"),
    ("POST", "/v1/systemone", json.dumps({"state": "s", "questions": {"a": {"type": "choice",
                                          "criteria": {f"o{i}": None for i in range(256)}}}}), 422, "255"),
    ("POST", "/v1/systemone", json.dumps({"state": "word " * 400, "questions": {"a": {"type": "noul"}}}), 422, "state"),
    ("POST", "/v1/systemone", "x" * 70000, 413, "65536"),
    ("GET", "/nope", None, 404, "/nope"),
    ("POST", "/v1/nope", "{}", 404, "/v1/nope"),
    ("GET", "/v1/systemone", None, 405, "POST"),
    ("PUT", "/v1/systemone", "{}", 405, "POST"),
    ("POST", "/health", "{}", 405, "GET"),
    ("DELETE", "/v1/models", None, 405, "GET"),
]


@pytest.mark.parametrize("method,path,body,status,needle", ERRORS)
def test_error_statuses(server, method, path, body, status, needle):
    got, hdrs, err = server.request(method, path, body)
    assert got == status, err
    assert hdrs["content-type"].startswith("application/json")
    assert list(err) == ["detail"] and isinstance(err["detail"], str)
    assert needle in err["detail"]
    if status == 405:  # a GET route also answers HEAD (RFC 9110 9.3.2)
        assert hdrs["allow"] == ("GET, HEAD" if needle == "GET" else needle)
    # The server is still healthy afterwards.
    assert server.request("GET", "/health")[0] == 200


def run_concurrently(fn, items, workers, deadline_s=300):
    """fn(item) for every item from `workers` threads; returns results in item order."""
    results = [None] * len(items)
    next_index = [0]
    lock = threading.Lock()
    start = threading.Barrier(workers)

    def worker():
        start.wait(timeout=60)
        while True:
            with lock:
                i = next_index[0]
                next_index[0] += 1
            if i >= len(items):
                return
            try:
                results[i] = fn(items[i])
            except Exception as e:  # recorded, asserted by the caller
                results[i] = e

    threads = [threading.Thread(target=worker, daemon=True) for _ in range(workers)]
    for t in threads:
        t.start()
    end = time.monotonic() + deadline_s
    for t in threads:
        t.join(timeout=max(0.1, end - time.monotonic()))
    assert not any(t.is_alive() for t in threads), "requests did not finish in time"
    return results


def test_concurrent_equals_sequential(server):
    sequential = [server.score(r)[2]["answers"] for r in REQUESTS]
    items = [i % len(REQUESTS) for i in range(20)]
    results = run_concurrently(lambda i: server.score(REQUESTS[i]), items, workers=4)
    for i, res in zip(items, results):
        assert not isinstance(res, Exception), res
        status, _, body = res
        assert status == 200, body
        assert body["answers"] == sequential[i]


def slow_request(tag, questions=1):
    """A long state and 64 options per question: ~0.3 s per question on the tiny synth model (row
    cost grows faster than linearly with its length), far slower than a trivial request."""
    opts = {f"option {i} {tag}": None for i in range(64)}
    return {"state": f"{tag} " + "the customer wrote a long message about the order " * 20,
            "questions": {f"q{k}": {"type": "choice", "instructions": f"pick {k}", "criteria": opts}
                          for k in range(questions)}}


@pytest.mark.parametrize("max_queue", [0, 2])
def test_overload_answers_503_and_loses_nothing(bundle, max_queue):
    s = Server(bundle, "--max-inflight", 1, "--max-queue", max_queue, "--cache-entries", 0)
    try:
        req = slow_request("load")
        status, _, first = s.score(req)
        assert status == 200, first
        saw_503 = False
        for _ in range(5):  # bounded rounds; one is normally enough
            results = run_concurrently(lambda r: s.score(r), [req] * 8, workers=8)
            for res in results:
                assert not isinstance(res, Exception), res  # none lost: every request answered
                status, hdrs, body = res
                assert status in (200, 503), body
                if status == 200:
                    assert body["answers"] == first["answers"]
                else:
                    assert list(body) == ["detail"] and "busy" in body["detail"]
                    assert int(hdrs["retry-after"]) >= 1
                    saw_503 = True
            # The one scoring and every queued request are answered: at least 1 + max_queue 200s.
            assert sum(1 for r in results if r[0] == 200) >= 1 + max_queue
            if saw_503:
                break
        assert saw_503, f"8 simultaneous slow requests with --max-inflight 1 --max-queue {max_queue} never got a 503"
        health = s.request("GET", "/health")[2]
        assert health["inflight"] == 0 and health["queued"] == 0
    finally:
        s.close()


def test_sigterm_finishes_inflight_request_then_exits_0(bundle):
    s = Server(bundle, "--cache-entries", 0)
    try:
        req = slow_request("term", questions=2)
        status, _, expected = s.score(req)
        assert status == 200
        result = []
        t = threading.Thread(target=lambda: result.append(s.score(req)), daemon=True)
        t.start()
        # Wait (bounded) until the request is being scored, then signal.
        end = time.monotonic() + 30
        while time.monotonic() < end and s.request("GET", "/health")[2]["inflight"] == 0 and t.is_alive():
            time.sleep(0.005)
        assert t.is_alive(), "the request finished before the signal could be sent; make it slower"
        s.proc.send_signal(signal.SIGTERM)
        t.join(timeout=120)
        assert result, "the in-flight request got no answer"
        status, _, body = result[0]
        assert status == 200 and body["answers"] == expected["answers"]
        assert s.proc.wait(timeout=60) == 0, s.stderr()
        # No longer accepting.
        with pytest.raises(OSError):
            s.request("GET", "/health", timeout=5)
    finally:
        s.close()


def test_request_log_lines(bundle):
    s = Server(bundle)
    try:
        assert s.score(REQUESTS[1])[0] == 200
        assert s.request("GET", "/missing")[0] == 404
    finally:
        s.proc.send_signal(signal.SIGTERM)
        s.proc.wait(timeout=60)
        log = s.stderr()
        s.close()
    assert any(l.startswith("kev serve: POST /v1/systemone 200 ") and l.endswith(" ms") for l in log.splitlines()), log
    assert any(l.startswith("kev serve: GET /missing 404 ") for l in log.splitlines()), log


def test_quiet_has_no_request_log(bundle):
    s = Server(bundle, "--quiet")
    try:
        assert s.score(REQUESTS[1])[0] == 200
    finally:
        s.proc.send_signal(signal.SIGTERM)
        assert s.proc.wait(timeout=60) == 0
        log = s.stderr()
        s.close()
    assert "POST" not in log


def test_loading_and_binding_refusals(bundle, tmp_path):
    proc = run_kev("serve", "--bundle", tmp_path / "missing", "--port", 0, check=False, timeout=60)
    assert proc.returncode != 0 and proc.stdout == ""
    assert proc.stderr.startswith("kev serve: ") and proc.stderr.count("\n") == 1
    s = Server(bundle)
    try:  # the port is taken: one sentence naming it, non-zero exit
        proc = run_kev("serve", "--bundle", bundle, "--port", s.port, check=False, timeout=60)
        assert proc.returncode != 0 and proc.stdout == ""
        assert str(s.port) in proc.stderr and proc.stderr.count("\n") == 1
    finally:
        s.close()
