"""The replica lifecycle a load balancer relies on, through the real `kev serve`:
/health/live, /health/ready (ready / draining, 503 + Retry-After), /health "ready", and SIGTERM
with --drain-delay (not ready at once, still serving during the delay, then exit 0).

Every server listens on 127.0.0.1 with --port 0 and is killed by its pid in teardown."""
import http.client
import json
import os
import signal
import subprocess
import sys
import time

import pytest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "pylib"))
from kevtest import KEV_BIN, port_of, read_listening, synth_bundle  # noqa: E402

REQ = {"state": "lifecycle state", "questions": {"q": {"type": "noul", "instructions": "Refund?"}}}


@pytest.fixture(scope="module")
def bundle(tmp_path_factory):
    return synth_bundle(tmp_path_factory.mktemp("lifecycle"), "--seed", 3)[1]


def start(bundle, *args):
    proc = subprocess.Popen([KEV_BIN, "serve", "--bundle", bundle, "--port", "0", "--quiet", *map(str, args)],
                            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    listening = read_listening(proc)
    if listening is None:
        proc.kill()
        proc.wait(timeout=30)
        raise AssertionError("kev serve printed no listening line")
    return proc, port_of(listening)


def stop(proc):
    if proc.poll() is None:
        proc.kill()
        proc.wait(timeout=30)
    proc.stdout.close()


def get(port, method, path, body=None):
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
    try:
        conn.request(method, path, body=json.dumps(body) if body is not None else None)
        r = conn.getresponse()
        data = r.read()
        return r.status, {k.lower(): v for k, v in r.getheaders()}, json.loads(data)
    finally:
        conn.close()


def test_live_and_ready_when_loaded(bundle):
    proc, port = start(bundle)
    try:
        assert get(port, "GET", "/health/live")[::2] == (200, {"status": "live"})
        status, _, body = get(port, "GET", "/health/ready")
        assert status == 200 and body["status"] == "ready" and isinstance(body["model"], str)
        assert get(port, "GET", "/health")[2]["ready"] is True
        assert get(port, "POST", "/health/ready")[0] == 405
    finally:
        stop(proc)


def test_sigterm_turns_not_ready_serves_through_drain_delay_then_exits_0(bundle):
    proc, port = start(bundle, "--drain-delay", 5)
    try:
        status, _, expected = get(port, "POST", "/v1/systemone", REQ)
        assert status == 200
        proc.send_signal(signal.SIGTERM)
        t0 = time.monotonic()
        # Not ready within a few polls (the signal watcher polls every 50 ms).
        deadline = t0 + 1.0
        status = None
        while time.monotonic() < deadline:
            status, hdrs, body = get(port, "GET", "/health/ready")
            if status == 503:
                break
            time.sleep(0.01)
        assert status == 503 and body == {"status": "draining"} and hdrs["retry-after"] == "1"
        assert get(port, "GET", "/health/live")[::2] == (200, {"status": "live"})
        assert get(port, "GET", "/health")[2]["ready"] is False
        # Still serving normally during the drain delay, on new connections.
        status, _, body = get(port, "POST", "/v1/systemone", REQ)
        assert status == 200 and body["answers"] == expected["answers"]
        assert time.monotonic() - t0 < 4.5, "the checks above took longer than the drain delay"
        assert proc.wait(timeout=30) == 0
        assert time.monotonic() - t0 >= 4.9  # it waited for the drain delay
        with pytest.raises(OSError):
            get(port, "GET", "/health/live")
    finally:
        stop(proc)


def test_drain_delay_zero_exits_promptly(bundle):
    proc, port = start(bundle)
    try:
        t0 = time.monotonic()
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=30) == 0
        assert time.monotonic() - t0 < 5
    finally:
        stop(proc)


def test_drain_deadline_stops_a_long_prefill_and_answers_503(bundle):
    # A state of ~39,000 tokens keeps the tiny model busy far longer than the drain deadline;
    # after SIGTERM + --drain-timeout it must stop at its next prefill step (2,048 tokens), answer
    # 503 with Retry-After, and the server must exit 0 promptly (docs/serving.md, lifecycle).
    words = [f"clause{i % 97} of the agreement" for i in range(3000)]
    long_req = {"state": " ".join(words), "questions": REQ["questions"]}
    proc, port = start(bundle, "--drain-timeout", 1)
    try:
        result = {}

        def send():
            try:
                result["reply"] = get(port, "POST", "/v1/systemone", long_req)
            except Exception as e:  # noqa: BLE001 - reported below
                result["error"] = repr(e)

        import threading
        t = threading.Thread(target=send)
        t.start()
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and get(port, "GET", "/health")[2].get("inflight", 0) < 1:
            time.sleep(0.05)
        assert get(port, "GET", "/health")[2]["inflight"] == 1, "the long request never started"
        t0 = time.monotonic()
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=120) == 0
        elapsed = time.monotonic() - t0
        t.join(timeout=30)
        assert "error" not in result, result.get("error")
        status, hdrs, body = result["reply"]
        assert status == 503 and hdrs["retry-after"] == "1"
        assert "drain deadline" in body["detail"]
        assert 0.9 <= elapsed < 60, elapsed  # drain timeout + one prefill step (slow under TSan)
    finally:
        stop(proc)
