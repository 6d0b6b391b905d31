"""`kev serve` admission through the real binary: the fairness rule (clients that pipeline requests
and never read their replies do not keep normal clients out) and the memory budget (a request is
admitted to scoring only while the keys/values and workspace it will need fit --memory-budget).
The rules are in docs/serving.md ("Admission"); every server runs on 127.0.0.1 and is killed in
teardown; every loop is bounded in count and time."""
import json
import os
import socket
import statistics
import sys
import threading
import time

import pytest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "pylib"))
from kevtest import ServeProcess, synth_bundle, wait_for  # noqa: E402

QUICK = {"state": "plain text state", "questions": {"q": {"type": "noul", "instructions": "Refund?"}}}


@pytest.fixture(scope="module")
def bundle(tmp_path_factory):
    return synth_bundle(tmp_path_factory.mktemp("admission"), "--seed", 11)[1]


def post_bytes(body):
    data = json.dumps(body).encode()
    return (b"POST /v1/systemone HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
            b"Content-Length: " + str(len(data)).encode() + b"\r\n\r\n" + data)


def pipeliner_request(i):
    """A request that costs the tiny model a few tens of milliseconds (a longer state, 16 options)."""
    return {"state": f"pipeliner {i} " + "the customer asked about the delivery window " * 12,
            "questions": {"q": {"type": "choice", "instructions": "pick",
                                "criteria": {f"option {k}": None for k in range(16)}}}}


def normal_clients(s, n, deadline_s):
    """n clients one after the other, each on a new connection: (status, seconds) per request."""
    out = []
    for i in range(n):
        t = time.monotonic()
        try:
            status = s.score({"state": f"normal {i}", "questions": QUICK["questions"]}, timeout=deadline_s)[0]
        except OSError as e:  # a timeout is a failure of the rule, reported as such
            status = repr(e)
        out.append((status, time.monotonic() - t))
    return out


# Thirty connections pipeline requests and never read an answer (each connection's next request is
# admitted as soon as its last reply fits the socket buffers), beside ten normal clients. Before the
# fairness rule the pipeliners kept the queue full: the normal clients got 503s or waited behind the
# whole queue. Now each normal request waits at most for the pass in progress (one pipelined request
# at a time) and its own: every one is answered 200 within a bound, on every repetition.
@pytest.mark.parametrize("run", range(3))
def test_non_reading_pipeliners_do_not_keep_normal_clients_out(bundle, run):
    s = ServeProcess(bundle, "--max-inflight", 1, "--max-queue", 16, "--cache-entries", 0)
    held = []
    try:
        alone = normal_clients(s, 5, 30)
        assert all(st == 200 for st, _ in alone), alone
        single = statistics.median(d for _, d in alone)
        for i in range(30):
            c = socket.create_connection(("127.0.0.1", s.port), timeout=10)
            c.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
            c.sendall(post_bytes(pipeliner_request(f"{run}-{i}")) * 40)  # never read
            held.append(c)
        # The pipeliners are in: the queue is busy with their requests.
        assert wait_for(lambda: s.request("GET", "/health")[2]["queued"] >= 10, timeout=30)
        got = normal_clients(s, 10, 30)
        still = s.request("GET", "/health")[2]
        statuses = [st for st, _ in got]
        worst = max(d for _, d in got)
        assert statuses == [200] * 10, (statuses, s.stderr()[-2000:])
        # One pipelined pass in progress plus the request's own: a few times a request alone, far
        # under what waiting behind the 16 queued pipelined requests would take. The absolute floor
        # keeps the bound meaningful on a loaded machine without depending on its load.
        assert worst < max(3.0, 20 * single), (worst, single, got)
        assert still["queued"] >= 1, still  # the pipeliners were still queued while they were served
    finally:
        for c in held:
            c.close()
        s.close()


# A pipeliner whose queued request gives way is answered 503 + Retry-After in order, never dropped:
# its replies, once read, are complete HTTP responses, each 200 or 503, and at least one is the
# displacement (four pipeliners keep the three places full of slow pipelined requests, but for the
# moment between a pipelined reply and the next pipelined request: a few ms in 0.3 s).
def test_a_displaced_pipelined_request_is_answered_503_in_order(bundle):
    s = ServeProcess(bundle, "--max-inflight", 1, "--max-queue", 2, "--cache-entries", 0)
    held = []
    try:
        slow = {"state": "the customer wrote a long message about the order " * 20,
                "questions": {"q": {"type": "choice", "instructions": "pick",
                                    "criteria": {f"option {k}": None for k in range(64)}}}}
        for i in range(4):
            c = socket.create_connection(("127.0.0.1", s.port), timeout=10)
            c.sendall(post_bytes(dict(slow, state=f"{i} " + slow["state"])) * 4)
            held.append(c)
        assert wait_for(lambda: s.request("GET", "/health")[2]["queued"] >= 2, timeout=30)
        got = normal_clients(s, 4, 60)
        assert [st for st, _ in got] == [200] * 4, got
        replies = []
        for c in held:  # now read everything: 4 complete replies per connection, in order
            c.settimeout(120)
            data = b""
            while data.count(b"HTTP/1.1 ") < 4 or not data.endswith(b"}"):
                chunk = c.recv(65536)
                assert chunk, data[-300:]
                data += chunk
            parts = data.split(b"HTTP/1.1 ")[1:]
            assert len(parts) == 4, data[-500:]
            for part in parts:
                head, body = part.split(b"\r\n\r\n", 1)
                status = int(head[:3])
                assert status in (200, 503), head
                if status == 503:
                    assert b"retry-after: 1" in head.lower(), head
                replies.append((status, json.loads(body)))
        displaced = [b for st, b in replies if st == 503 and "gave its place" in b["detail"]]
        assert displaced, replies
    finally:
        for c in held:
            c.close()
        s.close()


# ---- memory admission ----------------------------------------------------------------------------

def text_config(bundle):
    with open(os.path.join(bundle, "config.json")) as f:
        root = json.load(f)
    return root.get("text_config", root)


def memory_need(tc, state_tokens, branch_tokens, longest_branch, threads=2, prefill_step=2048):
    """docs/serving.md "Memory of long states", written here from the config (fp32), for a
    server started with --threads `threads` (and --prefill-step `prefill_step`)."""
    layers = tc["num_hidden_layers"]
    if "layer_types" in tc:
        full = [t == "full_attention" for t in tc["layer_types"]]
    else:
        full = [(l + 1) % tc["full_attention_interval"] == 0 for l in range(layers)]
    attention, gdn_layers = sum(full), layers - sum(full)
    hidden, inter = tc["hidden_size"], tc["intermediate_size"]
    heads, kv_heads, head_dim = tc["num_attention_heads"], tc["num_key_value_heads"], tc["head_dim"]
    k_heads, v_heads = tc["linear_num_key_heads"], tc["linear_num_value_heads"]
    k_dim, v_dim, kernel = tc["linear_key_head_dim"], tc["linear_value_head_dim"], tc["linear_conv_kernel_dim"]
    rope = tc.get("rope_parameters") or {}
    factor = rope.get("partial_rotary_factor", tc.get("partial_rotary_factor", 1.0))
    rotary = int(head_dim * factor)
    conv_dim = 2 * k_heads * k_dim + v_heads * v_dim
    kv = 8 * kv_heads * head_dim * attention
    gdn = 4 * 4 * ((kernel - 1) * conv_dim + v_heads * k_dim * v_dim) * gdn_layers
    aux = max(kv_heads * head_dim, v_heads, heads * head_dim)
    ws = 4 * (4 * hidden + 2 * max(inter, 2 * heads * head_dim, v_heads * v_dim)
              + max(conv_dim, kv_heads * head_dim) + max(aux, conv_dim) + aux + rotary)
    step = min(state_tokens, prefill_step)
    passes = max(step, min(branch_tokens, max(4096, longest_branch)), min(step + branch_tokens, 4096))
    att = 4 * 16 * (heads // kv_heads) * threads
    return kv * state_tokens + gdn + ws * passes + att * (state_tokens + longest_branch)


def long_request(tag, words=400, questions=1):
    return {"state": f"{tag} " + "the customer wrote again about the late parcel " * (words // 8),
            "questions": {f"q{k}": {"type": "choice", "instructions": f"pick {k}",
                                    "criteria": {f"option {i}": None for i in range(32)}}
                          for k in range(questions)}}


def logged_tokens(s, tag):
    """(state_tokens, row_tokens) of the request whose path carries ?tag, from the JSON log."""
    def find():
        for line in s.stderr().splitlines():
            if line.startswith("{") and f"?{tag}" in line:
                return json.loads(line)
        return None
    assert wait_for(lambda: find() is not None, timeout=30), s.stderr()[-1000:]
    line = find()
    return line["state_tokens"], line["row_tokens"]


def test_memory_budget_refuses_exactly_what_cannot_fit(bundle):
    tc = text_config(bundle)
    req = long_request("mem", words=400)
    s = ServeProcess(bundle, "--log-format", "json", "--memory-budget", 1 << 40)
    try:
        status, _, body = s.request("POST", "/v1/systemone?sized", req)
        assert status == 200, body
        state, rows = logged_tokens(s, "sized")
        assert state > 300 and rows > 32
        health = s.request("GET", "/health")[2]
        assert health["memory"] == {"budget": 1 << 40, "reserved": 0, "waiting": 0}
    finally:
        s.close()
    need = memory_need(tc, state, rows, rows)  # one question: its branch is every row token
    # One byte short: refused by name, 413, no Retry-After; a short request still fits.
    s = ServeProcess(bundle, "--threads", 2, "--memory-budget", need - 1)
    try:
        status, hdrs, body = s.score(req)
        assert status == 413 and "retry-after" not in hdrs, (status, body)
        assert f"({need} bytes" in body["detail"] and "--memory-budget" in body["detail"], body
        assert f"({need - 1} bytes" in body["detail"], body
        assert s.score(QUICK)[0] == 200
        assert s.request("GET", "/health")[2]["memory"]["reserved"] == 0  # given back after each
    finally:
        s.close()
    # Exactly enough: scored.
    s = ServeProcess(bundle, "--threads", 2, "--memory-budget", need)
    try:
        status, _, body = s.score(req)
        assert status == 200, body
    finally:
        s.close()


def test_prefill_step_is_what_admission_counts(bundle):
    """--prefill-step 64: the request needs the formula's bytes at a 64-token step (less than at
    the default 2,048), and is scored in exactly that budget."""
    tc = text_config(bundle)
    req = long_request("step", words=400)
    s = ServeProcess(bundle, "--log-format", "json", "--memory-budget", 1 << 40, "--prefill-step", 64)
    try:
        status, _, body = s.request("POST", "/v1/systemone?stepped", req)
        assert status == 200, body
        state, rows = logged_tokens(s, "stepped")
    finally:
        s.close()
    need = memory_need(tc, state, rows, rows, prefill_step=64)
    assert need < memory_need(tc, state, rows, rows)
    s = ServeProcess(bundle, "--threads", 2, "--memory-budget", need - 1, "--prefill-step", 64)
    try:
        status, _, body = s.score(req)
        assert status == 413 and f"({need} bytes" in body["detail"], (status, body)
    finally:
        s.close()
    s = ServeProcess(bundle, "--threads", 2, "--memory-budget", need, "--prefill-step", 64)
    try:
        assert s.score(req)[0] == 200
    finally:
        s.close()


# Two workers, a budget with room for one long request: the second waits for the first's memory
# (scored after it, both 200), or, past its queue deadline, is answered 503 + Retry-After.
def sized_need(bundle, tc, request):
    """memory_need of `request` (one question's branch taken as every row token), from the token
    counts a server with room for anything logs for it."""
    s = ServeProcess(bundle, "--log-format", "json", "--memory-budget", 1 << 40, "--cache-entries", 0)
    try:
        assert s.request("POST", "/v1/systemone?sized", request)[0] == 200
        state, rows = logged_tokens(s, "sized")
    finally:
        s.close()
    return memory_need(tc, state, rows, rows)


def test_memory_budget_queues_then_refuses_503_at_the_deadline(bundle):
    tc = text_config(bundle)
    slow = long_request("wait", words=400, questions=6)
    need = sized_need(bundle, tc, slow)  # rows <= 4096: the rows' pass term is all of them
    budget = need + need // 2
    s = ServeProcess(bundle, "--threads", 2, "--max-inflight", 2, "--memory-budget", budget,
                     "--cache-entries", 0)
    try:
        results = {}
        first = threading.Thread(target=lambda: results.__setitem__("a", s.score(slow)), daemon=True)
        first.start()
        assert wait_for(lambda: s.request("GET", "/health")[2]["memory"]["reserved"] > 0)
        second = threading.Thread(target=lambda: results.__setitem__("b", s.score(dict(slow))), daemon=True)
        second.start()
        # The second is taken by the free worker and waits for memory, never reserved beside it.
        assert wait_for(lambda: s.request("GET", "/health")[2]["memory"]["waiting"] == 1), s.stderr()[-500:]
        m = s.request("GET", "/health")[2]["memory"]
        assert m["reserved"] <= budget and m["budget"] == budget, m
        first.join(timeout=300)
        second.join(timeout=300)
        assert results["a"][0] == 200 and results["b"][0] == 200, results
        assert s.request("GET", "/health")[2]["memory"] == {"budget": budget, "reserved": 0, "waiting": 0}
    finally:
        s.close()
    # The deadline: a first request several times `slow` holds its memory well past the second's
    # 0.3 s on any machine; the budget has room for it alone, not for it and `slow` together.
    heavy = long_request("deadline", words=2400, questions=6)
    budget = sized_need(bundle, tc, heavy) + need // 2
    s = ServeProcess(bundle, "--threads", 2, "--max-inflight", 2, "--memory-budget", budget,
                     "--cache-entries", 0, "--queue-timeout", 0.3)
    try:
        results = {}
        first = threading.Thread(target=lambda: results.__setitem__("a", s.score(heavy)), daemon=True)
        first.start()
        assert wait_for(lambda: s.request("GET", "/health")[2]["memory"]["reserved"] > 0)
        t = time.monotonic()
        status, hdrs, body = s.score(slow)  # waits for memory (the first takes seconds), then 503
        waited = time.monotonic() - t
        assert status == 503 and hdrs["retry-after"] == "1", (status, body)
        assert "no memory for scoring became free within 0.3 s" in body["detail"], body
        assert waited < 0.3 + 3, waited  # at its deadline, not when the first ends
        first.join(timeout=300)
        assert results["a"][0] == 200, results
    finally:
        s.close()
