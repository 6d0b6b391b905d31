"""Cross-request batching in `kev serve` (--max-batch), through the real binary: requests scored
together in one model pass (their question rows batched, each on its own cached or fresh state
prefix) get bit for bit the response bodies (answers, usage, model; not latency_ms) that a
`--max-batch 1` server gives the same requests sent one at a time, and each keeps its own error
and its own 499.

Every server is started with --port 0 on 127.0.0.1 and always killed in teardown; every loop is
bounded in count and time."""
import json
import os
import socket
import struct
import sys
import threading

import urllib.request

import pytest
from prometheus_client.parser import text_string_to_metric_families

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "pylib"))
from kevtest import ServeProcess, synth_bundle, wait_for  # noqa: E402

CHOICE = {"type": "choice", "instructions": "Next step?", "criteria": {"ship": "confirm", "refund": None, "wait": ""}}
NOUL = {"type": "noul", "instructions": "Offer a discount?"}
SCORE = {"type": "score", "instructions": "Satisfaction", "criteria": ["angry", "neutral", "happy", "delighted"]}
MIXES = [{"c": CHOICE}, {"n": NOUL, "s": SCORE}, {"s": SCORE, "c": CHOICE, "n": NOUL},
         {"c1": CHOICE, "c2": {**CHOICE, "instructions": "Other?"}}, {"n": NOUL}]
# States scored before the batch (cached when the batch runs).
WARM = [{"customer": "Ada", "cart": ["tea", "scones"]}, "plain text state", ["a", {"b": 1.5, "c": True}]]
# --queue-timeout 300: requests wait behind a slow blocker, which under ThreadSanitizer on a busy
# 2-core machine can take longer than the default 30 s; no test here is about expiry.
SERVER_ARGS = ("--max-inflight", 1, "--max-queue", 64, "--cache-entries", 256, "--max-state", 2048,
               "--usage-details", "--queue-timeout", 300)


def req(state, mix):
    return {"state": state, "questions": MIXES[mix % len(MIXES)]}


def slow_request(tag, questions=2):
    """A long state and 64 options per question: ~0.3 s per question on the tiny synth model."""
    opts = {f"option {i} {tag}": None for i in range(64)}
    return {"state": f"{tag} " + "the customer wrote a long message about the order " * 20,
            "questions": {f"q{k}": {"type": "choice", "instructions": f"pick {k}", "criteria": opts}
                          for k in range(questions)}}


def comparable(status, body):
    """What must be identical: the status and the whole body except latency_ms."""
    body = dict(body)
    body.pop("latency_ms", None)
    return status, json.dumps(body, sort_keys=True)



@pytest.fixture(scope="module")
def bundle(tmp_path_factory):
    return synth_bundle(tmp_path_factory.mktemp("batching"), "--seed", 5)[1]


@pytest.fixture(scope="module")
def servers(bundle):
    """(batched server, one-at-a-time reference server)."""
    batched = ServeProcess(bundle, *SERVER_ARGS, "--max-batch", 16)
    try:
        single = ServeProcess(bundle, *SERVER_ARGS, "--max-batch", 1)
        try:
            yield batched, single
        finally:
            single.close()
    finally:
        batched.close()


def batches(server):
    return server.request("GET", "/health")[2]["batches"]


def batch_size_histogram(server):
    """(count, sum, {le: cumulative}) of /metrics' kev_batch_size, read with Prometheus' parser."""
    with urllib.request.urlopen(f"http://127.0.0.1:{server.port}/metrics", timeout=30) as r:
        text = r.read().decode()
    (family,) = [f for f in text_string_to_metric_families(text) if f.name == "kev_batch_size"]
    count = sum_ = None
    buckets = {}
    for smp in family.samples:
        if smp.name.endswith("_count"):
            count = smp.value
        elif smp.name.endswith("_sum"):
            sum_ = smp.value
        elif smp.name.endswith("_bucket"):
            buckets[float(smp.labels["le"])] = smp.value
    return count, sum_, buckets


def test_queued_batch_equals_one_at_a_time(servers):
    """Requests queued behind a slow one are taken as one batch (FIFO, so the cache sees them in
    the same order as the reference): cached and fresh states (one fresh state twice, so the
    second is a hit made inside the batch), every question type and count, a malformed body, an
    invalid request (refused while parsing), one refused by the scorer (state too long) and a
    client that resets while queued."""
    batched, single = servers
    for s in (batched, single):
        for i, state in enumerate(WARM):
            assert s.score(req(state, i))[0] == 200
    items = [
        ("ok", req(WARM[0], 0)),                        # cached
        ("ok", req("fresh one", 1)),                    # fresh
        ("ok", req(WARM[1], 2)),                        # cached
        ("bad", "{not json"),                           # 400, alone
        ("ok", req({"fresh": ["two", 2]}, 3)),          # fresh
        ("reset", req("never scored", 0)),              # 499: reset while queued
        ("ok", req("fresh one", 4)),                    # cached inside the batch (2nd use)
        ("bad", {"state": "s", "questions": {"a": {"type": "ranking", "criteria": ["x"]}}}),  # 422
        ("ok", req(WARM[2], 1)),                        # cached
        ("fail", {"state": "word " * 2100, "questions": {"a": NOUL}}),  # 422 in the scorer: over --max-state
        ("ok", req(["fresh", "three"], 2)),             # fresh
        ("ok", req("word " * 60, 0)),                   # fresh, longer
    ]
    before = batches(batched)
    metrics_before = batch_size_histogram(batched)
    results = {}

    def send(i, body):
        results[i] = batched.score(body)

    blocker = threading.Thread(target=lambda: batched.score(slow_request("block", questions=8)), daemon=True)
    blocker.start()
    assert wait_for(lambda: batched.request("GET", "/health")[2]["inflight"] == 1)
    threads, resets = [], []
    for i, (kind, body) in enumerate(items):
        if kind == "reset":
            c = socket.create_connection(("127.0.0.1", batched.port), timeout=10)
            data = json.dumps(body).encode()
            c.sendall(b"POST /v1/systemone HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                      b"Content-Length: " + str(len(data)).encode() + b"\r\n\r\n" + data)
            resets.append(c)
        else:
            t = threading.Thread(target=send, args=(i, body), daemon=True)
            t.start()
            threads.append(t)
        assert wait_for(lambda: batched.request("GET", "/health")[2]["queued"] == i + 1), i
    health = batched.request("GET", "/health")[2]
    assert health["inflight"] == 1 and health["queued"] == len(items), "the blocker ended too soon"
    for c in resets:
        c.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        c.close()  # RST while queued
    blocker.join(timeout=120)
    for t in threads:
        t.join(timeout=120)
    assert not any(t.is_alive() for t in threads)

    after = batches(batched)
    # A pass counts the requests it answered: not the 422s refused in their own encoding.
    scored = sum(1 for kind, _ in items if kind == "ok")
    assert after["passes"] == before["passes"] + 2, (before, after)  # the blocker, then one batch
    assert after["requests"] == before["requests"] + 1 + scored
    assert after["largest"] >= scored
    # /metrics sees the same passes: one of 1 (the blocker), one of `scored` requests.
    count, total, buckets = batch_size_histogram(batched)
    assert count - metrics_before[0] == 2 and total - metrics_before[1] == 1 + scored
    below = max(le for le in buckets if le < scored)
    assert buckets[below] - metrics_before[2][below] == 1  # the blocker's pass only
    assert wait_for(lambda: "499" in batched.stderr(), timeout=10), batched.stderr()

    # The reference: the blocker, then every request one at a time in the same order.
    assert single.score(slow_request("block", questions=8))[0] == 200
    for i, (kind, body) in enumerate(items):
        if kind == "reset":
            continue
        want = single.score(body)
        got = results[i]
        assert comparable(got[0], got[2]) == comparable(want[0], want[2]), (i, got, want)
        assert (got[0] == 200) == (kind == "ok"), (i, got)
    cached = [results[i][2]["usage"]["cached_tokens"] > 0 for i, (k, _) in enumerate(items) if k == "ok"]
    assert cached == [True, False, True, False, True, True, False, False], cached


def test_permute_is_never_batched_with_other_requests(servers):
    """A permute request runs several passes of its own: queued between /v1/systemone requests it
    is taken alone, so the request before it is scored in its own pass and the two after it
    share one (rather than all of them waiting inside the permute's batch)."""
    batched, _ = servers
    choice = {"type": "choice", "instructions": "Pick", "criteria": {"a": None, "b": None, "c": None}}
    plain = lambda tag: {"state": f"permute neighbour {tag}", "questions": {"q": choice}}
    permute = {"request": {"state": "permuted state", "questions": {"q": choice}}, "question": "q",
               "n_perm": 3, "seed": 1}
    before = batches(batched)
    blocker = threading.Thread(target=lambda: batched.score(slow_request("pblock", questions=8)), daemon=True)
    blocker.start()
    assert wait_for(lambda: batched.request("GET", "/health")[2]["inflight"] == 1)
    results, threads = {}, []
    queue = [("/v1/systemone", plain("a")), ("/v1/systemone/permute", permute),
             ("/v1/systemone", plain("b")), ("/v1/systemone", plain("c"))]
    for i, (path, body) in enumerate(queue):
        t = threading.Thread(target=lambda i=i, path=path, body=body:
                             results.__setitem__(i, batched.request("POST", path, body)), daemon=True)
        t.start()
        threads.append(t)
        assert wait_for(lambda: batched.request("GET", "/health")[2]["queued"] == i + 1), i
    assert batched.request("GET", "/health")[2]["inflight"] == 1, "the blocker ended too soon"
    blocker.join(timeout=120)
    for t in threads:
        t.join(timeout=120)
    assert [results[i][0] for i in range(4)] == [200] * 4, results
    after = batches(batched)
    # blocker (1) + "a" alone (1) + the permute's 3 single-question passes + "b" and "c" together (1)
    assert after["passes"] - before["passes"] == 6, (before, after)
    assert after["requests"] - before["requests"] == 1 + 1 + 3 + 2, (before, after)


def test_concurrent_clients_equal_one_at_a_time(servers):
    """16 concurrent clients, cached and fresh states (each fresh state used once, so its cache
    miss does not depend on the order), different question counts: every body as the reference's."""
    batched, single = servers
    reqs = []
    for i in range(48):
        state = WARM[i % len(WARM)] if i % 2 == 0 else {"fresh": i, "note": "x" * (i % 7)}
        reqs.append(req(state, i))
    before = batches(batched)
    results = [None] * len(reqs)
    next_i, lock = [0], threading.Lock()

    def client():
        while True:
            with lock:
                i = next_i[0]
                next_i[0] += 1
            if i >= len(reqs):
                return
            results[i] = batched.score(reqs[i])

    threads = [threading.Thread(target=client, daemon=True) for _ in range(16)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=300)
    assert not any(t.is_alive() for t in threads)
    after = batches(batched)
    assert after["requests"] - before["requests"] == len(reqs)
    # Under 16 concurrent clients the single worker finds several requests queued at least once.
    assert after["passes"] - before["passes"] < len(reqs), (before, after)
    for i, r in enumerate(reqs):
        want = single.score(r)
        assert want[0] == 200 and results[i][0] == 200, (results[i], want)
        assert comparable(results[i][0], results[i][2]) == comparable(want[0], want[2]), i


def test_max_batch_flag_is_checked(bundle):
    for bad in ("0", "1025", "x"):
        s = ServeProcess(bundle, "--max-batch", bad, wait_listening=False)
        try:
            assert s.proc.wait(timeout=60) != 0
            assert "--max-batch" in s.stderr()
        finally:
            s.close()
