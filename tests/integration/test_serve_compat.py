"""`kev serve` as a drop-in for clients of the upstream Python server (jaredpalmer/kev kev/serve.py +
kev/api.py), through the real binary: any model name echoed (and `kev score` agreeing), upstream's
GET /v1/models cards, x-typesafe-request-id and server-timing on every response, Starlette's CORS
(preflight and simple responses), usage.output_tokens as upstream counts it, and the demo endpoints
POST /v1/systemone/permute and /separate checked against independent oracles (Python's own
random.Random for the option orders, the server's /v1/systemone answers for the probabilities,
json.dumps for the serialised answers). Ends with a replay of requests shaped like the upstream
typed-decisions suite. docs/api.md describes each contract.

Every server is started with --port 0 on 127.0.0.1 and always killed in teardown."""
import datetime
import json
import os
import random
import re
import sys
import uuid

import pytest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "pylib"))
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "oracle"))
from kevtest import ServeProcess, parse_responses, raw_exchange, run_kev, synth_bundle  # noqa: E402
from encode_reference import render as render_reference  # noqa: E402  (upstream's render, in Python)

MAX_STATE = 256
CHOICE = {"type": "choice", "instructions": "Which channel should handle this?",
          "criteria": {"email": "a written reply", "phone": "call the customer back", "chat": None,
                       "escalate": {"team": "tier 2", "sla_hours": 4}, "ignore": ""}}
NOUL = {"type": "noul", "instructions": "Is the customer at risk of churning?",
        "criteria": {"false": "they seem satisfied", "true": "they mention cancelling"}}
SCORE = {"type": "score", "instructions": "How urgent is it?",
         "criteria": ["not urgent", "this week", "today", {"level": "now", "why": "outage"}]}
STATE = {"customer": {"name": "Ada", "plan": "pro", "since": "2023-04-01"},
         "tickets": [{"id": 1, "text": "Billing page times out"}, {"id": 2, "text": "Still broken, thinking of cancelling"}],
         "flags": {"vip": True, "balance": 12.5, "notes": None}}
REQUEST = {"model": "jev-latest", "state": STATE, "questions": {"channel": CHOICE, "churn": NOUL, "urgency": SCORE}}
ID_RE = re.compile(r"^[0-9a-f]{32}$")
TIMING_RE = re.compile(r"^app;dur=\d+\.\d$")


@pytest.fixture(scope="module")
def bundle(tmp_path_factory):
    return synth_bundle(tmp_path_factory.mktemp("compat"), "--seed", 7)[1]


@pytest.fixture(scope="module")
def manifest(bundle):
    with open(os.path.join(bundle, "kev_export.json")) as f:
        return json.load(f)


@pytest.fixture(scope="module")
def server(bundle):
    s = ServeProcess(bundle, "--max-state", MAX_STATE, "--max-inflight", 2, "--max-queue", 64, "--max-body", 65536)
    try:
        yield s
    finally:
        s.close()


def post(server, path, body, headers=None):
    return server.request("POST", path, body, {"Content-Type": "application/json", **(headers or {})})


def score(server, req, headers=None):
    status, hdrs, body = post(server, "/v1/systemone", req, headers)
    assert status == 200, body
    return body


def raw_request(server, method, path, headers):
    """One request on its own connection, raw: -> (status, headers, body bytes), whatever the body."""
    raw = f"{method} {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n" + "".join(
        f"{k}: {v}\r\n" for k, v in headers.items()) + "\r\n"
    data, _ = raw_exchange(server.port, raw.encode())
    (reply,) = parse_responses(data)
    return reply


def is_uuid4_hex(s):
    return bool(ID_RE.match(s)) and uuid.UUID(hex=s).version == 4


# 1. Any model name is accepted and echoed; `kev score` agrees.

@pytest.mark.parametrize("model", ["jev-latest", "kev-latest", "gpt-4o", "", "modèle/ünïcode 🙂", "x" * 300],
                         ids=["jev", "kev", "other", "empty", "unicode", "long"])
def test_any_model_echoed(bundle, server, model):
    req = {**REQUEST, "model": model}
    got = score(server, req)
    assert got["model"] == model
    assert got["answers"] == score(server, {**REQUEST, "model": "kev-latest"})["answers"]
    proc = run_kev("score", "--bundle", bundle, "--jsonl", "--max-state", MAX_STATE, input=json.dumps(req) + "\n")
    cli = json.loads(proc.stdout)
    assert cli["model"] == model and cli["answers"] == got["answers"]
    assert cli["usage"]["output_tokens"] == got["usage"]["output_tokens"]


def test_missing_model_defaults_and_non_string_refused(server):
    req = {k: v for k, v in REQUEST.items() if k != "model"}
    assert score(server, req)["model"] == "kev-latest"
    for bad in (1, None, ["kev-latest"], {"name": "x"}, True):
        status, _, err = post(server, "/v1/systemone", {**REQUEST, "model": bad})
        assert status == 422 and "model" in err["detail"], (bad, err)


# 2. GET /v1/models: upstream's cards.

def test_models_cards(bundle, server, manifest):
    status, hdrs, body = server.request("GET", "/v1/models")
    assert status == 200 and hdrs["content-type"].startswith("application/json")
    assert list(body) == ["models"]
    cards = body["models"]
    assert [c["name"] for c in cards] == ["kev-latest", "jev-latest"]
    base, run, temp = manifest["base"]["repo"], manifest["checkpoint"]["repo"], manifest["temperature"]
    mtime = os.stat(os.path.join(bundle, "head.safetensors")).st_mtime
    date = datetime.datetime.fromtimestamp(mtime, datetime.timezone.utc).date().isoformat()
    for c in cards:
        assert list(c)[:3] == ["name", "description", "release_date"]
        assert c["description"] == f"Kev pointer head on {base}, serving {run} at temperature {temp:.2f}"
        assert c["release_date"] == date
        assert c["run"] == run and c["base"] == base and c["lora"] == manifest["lora"]["rank"]
        assert c["temperature"] == temp and c["bundle_model"] == manifest["model"]
        assert c["max_state_tokens"] == MAX_STATE and c["truncate_states"] is False
        assert c["device"] == "cpu" and c["cuda_graphs"] is None
        assert set(c["prefix_cache"]) == {"size", "min_state_tokens", "max_tokens", "hits", "misses",
                                          "cached_states", "oom_retries"}
        assert set(c["batches"]) == {"count", "requests", "queued"}
        assert all(isinstance(v, int) for v in c["prefix_cache"].values())
    assert {k: v for k, v in cards[0].items() if k != "name"} == {k: v for k, v in cards[1].items() if k != "name"}
    before = cards[0]["batches"]["count"]
    score(server, REQUEST)
    after = server.request("GET", "/v1/models")[2]["models"][0]
    assert after["batches"]["count"] == before + 1
    assert after["prefix_cache"]["hits"] + after["prefix_cache"]["misses"] > 0


# 3. Request id, server-timing, CORS.

def test_request_id_echoed_or_generated(server):
    _, hdrs, _ = post(server, "/v1/systemone", REQUEST, {"x-typesafe-request-id": "req_abc-123.x"})
    assert hdrs["x-typesafe-request-id"] == "req_abc-123.x"
    assert TIMING_RE.match(hdrs["server-timing"]), hdrs["server-timing"]
    seen = set()
    for _ in range(3):
        _, hdrs, _ = post(server, "/v1/systemone", REQUEST)
        assert is_uuid4_hex(hdrs["x-typesafe-request-id"]), hdrs
        seen.add(hdrs["x-typesafe-request-id"])
    assert len(seen) == 3
    # Too long: replaced, not echoed.
    _, hdrs, _ = server.request("GET", "/health", headers={"x-typesafe-request-id": "r" * 129})
    assert is_uuid4_hex(hdrs["x-typesafe-request-id"])
    _, hdrs, _ = server.request("GET", "/health", headers={"x-typesafe-request-id": "r" * 128})
    assert hdrs["x-typesafe-request-id"] == "r" * 128
    # Bytes outside printable ASCII: replaced (raw socket, since http.client refuses them).
    raw = (b"GET /health HTTP/1.1\r\nHost: x\r\nConnection: close\r\n"
           b"x-typesafe-request-id: caf\xc3\xa9\r\n\r\n")
    data, _ = raw_exchange(server.port, raw)
    (status, hdrs, _), = parse_responses(data)
    assert status == 200 and is_uuid4_hex(hdrs["x-typesafe-request-id"])


ANY_RESPONSE = [
    ("GET", "/health", None, 200),
    ("GET", "/health/live", None, 200),
    ("GET", "/health/ready", None, 200),
    ("GET", "/v1/models", None, 200),
    ("GET", "/nope", None, 404),
    ("GET", "/v1/systemone", None, 405),
    ("POST", "/v1/systemone", "{not json", 400),
    ("POST", "/v1/systemone", json.dumps({"state": "s", "questions": {}}), 422),
    ("POST", "/v1/systemone", "x" * 70000, 413),
    ("POST", "/v1/systemone/permute", json.dumps({"request": REQUEST, "question": "churn"}), 422),
]


@pytest.mark.parametrize("method,path,body,status", ANY_RESPONSE, ids=[f"{m}{p}-{s}" for m, p, _, s in ANY_RESPONSE])
def test_headers_on_every_response(server, method, path, body, status):
    got, hdrs, _ = server.request(method, path, body, {"x-typesafe-request-id": "mine"})
    assert got == status
    assert hdrs["x-typesafe-request-id"] == "mine"
    assert TIMING_RE.match(hdrs["server-timing"])
    assert "access-control-allow-origin" not in hdrs  # no Origin, no CORS fields (Starlette)
    got, hdrs, _ = server.request(method, path, body, {"Origin": "https://app.example"})
    assert got == status and is_uuid4_hex(hdrs["x-typesafe-request-id"])
    assert hdrs["access-control-allow-origin"] == "*"
    assert hdrs["access-control-expose-headers"] == "x-typesafe-request-id, server-timing"
    assert "vary" not in hdrs


def test_header_error_replies_carry_an_id(server):
    raw = b"GET /health HTTP/1.1\r\nHost: x\r\nX-Big: " + b"a" * 20000 + b"\r\n\r\n"
    data, _ = raw_exchange(server.port, raw)
    (status, hdrs, _), = parse_responses(data)
    assert status == 431 and is_uuid4_hex(hdrs["x-typesafe-request-id"])
    assert TIMING_RE.match(hdrs["server-timing"])


def test_cors_with_cookie_echoes_origin(server):
    _, hdrs, _ = server.request("GET", "/health", headers={"Origin": "https://app.example", "Cookie": "a=b"})
    assert hdrs["access-control-allow-origin"] == "https://app.example"
    assert hdrs["vary"] == "Origin"
    assert hdrs["access-control-expose-headers"] == "x-typesafe-request-id, server-timing"


@pytest.mark.parametrize("path", ["/v1/systemone", "/v1/models", "/v1/systemone/permute", "/anything"])
def test_cors_preflight(server, path):
    conn_headers = {"Origin": "https://app.example", "Access-Control-Request-Method": "POST",
                    "Access-Control-Request-Headers": "authorization, content-type, x-typesafe-request-id"}
    status, hdrs, body = raw_request(server, "OPTIONS", path, conn_headers)
    assert status == 200 and body == b"OK"
    assert hdrs["content-type"].startswith("text/plain")
    assert hdrs["access-control-allow-origin"] == "*"
    assert hdrs["access-control-allow-methods"] == "DELETE, GET, HEAD, OPTIONS, PATCH, POST, PUT"
    assert hdrs["access-control-max-age"] == "600"
    assert hdrs["access-control-allow-headers"] == conn_headers["Access-Control-Request-Headers"]
    assert "access-control-expose-headers" not in hdrs
    assert is_uuid4_hex(hdrs["x-typesafe-request-id"]) and TIMING_RE.match(hdrs["server-timing"])


def test_cors_preflight_refusals(server):
    status, hdrs, body = raw_request(server, "OPTIONS", "/v1/systemone", {
        "Origin": "https://app.example", "Access-Control-Request-Method": "TRACE"})
    assert status == 400 and body == b"Disallowed CORS method" and hdrs["access-control-allow-origin"] == "*"
    # Not a preflight (no Origin, or no Access-Control-Request-Method): routed, 405 with Allow.
    for headers in ({}, {"Origin": "https://app.example"}, {"Access-Control-Request-Method": "POST"}):
        status, hdrs, body = server.request("OPTIONS", "/v1/systemone", headers=headers)
        assert status == 405 and hdrs["allow"] == "POST" and "detail" in body


# usage.output_tokens: tokens of json.dumps(answers), as upstream counts them.

def tokens_of(bundle, text):
    proc = run_kev("tokenize", "--tokenizer", os.path.join(bundle, "tokenizer.json"), "--special", input=text)
    return len(json.loads(proc.stdout)["ids"])


def test_output_tokens(bundle, server):
    for req in (REQUEST, {"state": "x", "questions": {"q": {"type": "choice", "instructions": "",
                                                              "criteria": {"naïve \"quoted\"\n": None, "日本": 1}}}}):
        got = score(server, req)
        assert got["usage"]["output_tokens"] == tokens_of(bundle, json.dumps(got["answers"]))
        assert got["usage"]["output_tokens"] > 0


# 7. POST /v1/systemone/permute and /separate.

def python_orders(keys, n_perm, seed):
    rng = random.Random(seed)
    out = []
    for i in range(n_perm):
        order = list(keys)
        if i > 0:
            rng.shuffle(order)
        out.append(order)
    return out


@pytest.mark.parametrize("n_perm,seed", [(None, None), (1, 0), (5, 42), (8, -42), (3, 2**64 - 1), (4, 3.0)])
def test_permute_matches_oracle(server, n_perm, seed):
    body = {"request": REQUEST, "question": "channel"}
    if n_perm is not None:
        body["n_perm"] = n_perm
    if seed is not None:
        body["seed"] = seed
    status, _, got = post(server, "/v1/systemone/permute", body)
    assert status == 200, got
    keys = list(CHOICE["criteria"])
    orders = python_orders(keys, 6 if n_perm is None else n_perm, int(seed or 0))
    assert list(got) == ["runs", "argmax_stable", "spread"]
    assert [r["order"] for r in got["runs"]] == orders
    for run, order in zip(got["runs"], orders):
        assert list(run) == ["order", "probabilities", "choice", "latency_ms"]
        # The same question with its criteria in this order, asked alone of /v1/systemone.
        one = {"model": REQUEST["model"], "state": STATE,
               "questions": {"channel": {**CHOICE, "criteria": {k: CHOICE["criteria"][k] for k in order}}}}
        want = score(server, one)["answers"]["channel"]
        assert list(run["probabilities"]) == order
        assert run["probabilities"] == want["probabilities"] and run["choice"] == want["choice"]
        assert isinstance(run["latency_ms"], (int, float)) and run["latency_ms"] >= 0
    spread = {k: max(r["probabilities"][k] for r in got["runs"]) - min(r["probabilities"][k] for r in got["runs"])
              for k in keys}
    assert list(got["spread"]) == keys and got["spread"] == spread
    assert got["argmax_stable"] == (len({r["choice"] for r in got["runs"]}) == 1)


PERMUTE_REFUSALS = [
    ({"request": REQUEST, "question": "churn"}, "existing choice"),
    ({"request": REQUEST, "question": "nope"}, "existing choice"),
    ({"request": REQUEST}, "question"),
    ({"question": "channel"}, "request"),
    ({"request": {"state": "s", "questions": {}}, "question": "channel"}, "request"),
    ({"request": REQUEST, "question": "channel", "n_perm": 0}, "n_perm"),
    ({"request": REQUEST, "question": "channel", "n_perm": 65}, "n_perm"),
    ({"request": REQUEST, "question": "channel", "n_perm": 2.5}, "n_perm"),
    ({"request": REQUEST, "question": "channel", "n_perm": "6"}, "n_perm"),
    ({"request": REQUEST, "question": "channel", "seed": "1"}, "seed"),
    ({"request": REQUEST, "question": "channel", "seed": 2.0**70}, "seed"),
    ({"request": REQUEST, "question": 1}, "question"),
    ([], "object"),
]


@pytest.mark.parametrize("body,needle", PERMUTE_REFUSALS, ids=[str(i) for i in range(len(PERMUTE_REFUSALS))])
def test_permute_refusals(server, body, needle):
    status, _, err = post(server, "/v1/systemone/permute", body)
    assert status == 422 and needle in err["detail"], err


def test_permute_max_n_perm(server):
    status, _, got = post(server, "/v1/systemone/permute",
                          {"request": {"state": "short", "questions": {"c": {"type": "choice", "instructions": "",
                                                                            "criteria": {"a": None, "b": None}}}},
                           "question": "c", "n_perm": 64, "seed": 9})
    assert status == 200 and len(got["runs"]) == 64
    assert [r["order"] for r in got["runs"]] == python_orders(["a", "b"], 64, 9)


def test_separate_matches_single_questions(bundle, server):
    status, _, got = post(server, "/v1/systemone/separate", REQUEST)
    assert status == 200, got
    assert list(got) == ["model", "answers", "usage", "latency_ms"]
    assert got["model"] == "jev-latest"
    assert list(got["answers"]) == list(REQUEST["questions"])
    inputs = 0
    for qid, q in REQUEST["questions"].items():
        one = score(server, {**REQUEST, "questions": {qid: q}})
        assert got["answers"][qid] == one["answers"][qid]
        inputs += one["usage"]["input_tokens"]
    assert list(got["usage"]) == ["input_tokens", "output_tokens"]
    assert got["usage"]["input_tokens"] == inputs
    assert got["usage"]["output_tokens"] == tokens_of(bundle, json.dumps(got["answers"]))
    assert got["latency_ms"] == round(got["latency_ms"], 1) and got["latency_ms"] >= 0
    status, _, err = post(server, "/v1/systemone/separate", {"state": "s", "questions": {}})
    assert status == 422 and "question" in err["detail"]
    assert post(server, "/v1/systemone/separate", "{bad")[0] == 400


def test_truncation_marks_on_demo_endpoints(bundle):
    s = ServeProcess(bundle, "--max-state", 16, "--truncate")
    try:
        long_state = "word " * 100
        req = {"state": long_state, "questions": {"c": CHOICE, "n": NOUL}}
        status, _, sep = post(s, "/v1/systemone/separate", req)
        assert status == 200, sep
        assert sep["truncated"] is True
        assert sep["usage"]["state_tokens_used"] == 16 and sep["usage"]["state_tokens"] > 16
        status, _, perm = post(s, "/v1/systemone/permute", {"request": req, "question": "c", "n_perm": 2})
        assert status == 200, perm
        assert list(perm) == ["runs", "argmax_stable", "spread", "truncated", "usage"]
        assert perm["truncated"] is True and perm["usage"] == {k: sep["usage"][k] for k in ("state_tokens", "state_tokens_used")}
        status, _, short = post(s, "/v1/systemone/separate", {"state": "hi", "questions": {"n": NOUL}})
        assert status == 200 and short["truncated"] is False
        assert short["usage"]["state_tokens"] == short["usage"]["state_tokens_used"]
    finally:
        s.close()


# 12. Replay: requests shaped like the upstream typed-decisions suite, every contract at once.

REPLAY = [
    {"model": "jev-latest",
     "state": {"applicant": {"name": "R. Okafor", "income": 84000, "history": ["on time", "on time", "late 2023-02"]},
               "request": {"amount": 25000, "purpose": "home repair"}},
     "questions": {
         "approve": {"type": "noul", "instructions": "Approve the loan?",
                     "criteria": {"false": "decline, risk too high", "true": "approve at the standard rate"}},
         "tier": {"type": "choice", "instructions": "Pricing tier",
                  "criteria": {"A": "prime", "B": "near prime", "C": {"label": "subprime", "surcharge": 0.02}}},
         "risk": {"type": "score", "instructions": "Credit risk",
                  "criteria": ["very low", "low", "moderate", "high", "very high"]}}},
    {"model": "kev-latest", "state": "Shipment 4412 left Rotterdam on March 3, 2026 and is due 2026-03-20.",
     "questions": {"late": {"type": "noul", "instructions": "Will it arrive late?"},
                   "carrier": {"type": "choice", "instructions": {"ask": "Best carrier", "consider": ["cost", "speed"]},
                               "criteria": {"maersk": None, "msc": "", "cma": "CMA CGM"}}}},
    {"state": [{"role": "user", "text": "My order never came"}, {"role": "agent", "text": "Let me check"}, 3, None, True],
     "questions": {"sentiment": {"type": "score", "instructions": None,
                                 "criteria": [{"label": "negative"}, {"label": "neutral"}, {"label": "positive"}]},
                   "refund": {"type": "noul", "instructions": "Refund?", "criteria": {"true": "yes, in full"}},
                   "topic": {"type": "choice", "instructions": "Topic",
                             "criteria": {"delivery": "where is my order", "billing": None}}}},
    {"model": "jev-1.13.0", "state": None,
     "questions": {"only": {"type": "noul", "instructions": "Anything?", "criteria": None}}},
]


@pytest.mark.parametrize("i", range(len(REPLAY)))
def test_replay_typed_decisions(bundle, server, i):
    req = REPLAY[i]
    rid = f"replay-{i}"
    status, hdrs, got = post(server, "/v1/systemone", req,
                             {"x-typesafe-request-id": rid, "Origin": "https://frontend.example",
                              "Authorization": "Bearer anything"})
    assert status == 200, got
    assert hdrs["x-typesafe-request-id"] == rid and TIMING_RE.match(hdrs["server-timing"])
    assert hdrs["access-control-allow-origin"] == "*"
    assert list(got) == ["model", "answers", "usage", "latency_ms"]
    assert got["model"] == req.get("model", "kev-latest")
    assert list(got["answers"]) == list(req["questions"])
    for qid, q in req["questions"].items():
        a = got["answers"][qid]
        assert a["type"] == q["type"]
        if q["type"] == "noul":
            assert list(a) == ["type", "noul"] and 0 <= a["noul"] <= 1
        elif q["type"] == "choice":
            assert list(a) == ["type", "choice", "confidence", "probabilities"]
            assert list(a["probabilities"]) == list(q["criteria"]) and a["choice"] in q["criteria"]
        else:
            assert list(a) == ["type", "score", "legend", "probabilities", "confidence"]
            assert list(a["legend"]) == [str(k) for k in range(len(q["criteria"]))]
            assert 0 <= a["score"] <= len(q["criteria"]) - 1
    assert got["usage"]["input_tokens"] > 0
    assert got["usage"]["output_tokens"] == tokens_of(bundle, json.dumps(got["answers"]))
    # The CLI agrees on the same record.
    cli = json.loads(run_kev("score", "--bundle", bundle, "--jsonl", "--max-state", MAX_STATE,
                             input=json.dumps(req) + "\n").stdout)
    assert cli["model"] == got["model"] and cli["answers"] == got["answers"]
    # /separate answers each question as /v1/systemone would alone.
    status, _, sep = post(server, "/v1/systemone/separate", req)
    assert status == 200 and list(sep["answers"]) == list(req["questions"])
    for qid, q in req["questions"].items():
        assert sep["answers"][qid] == score(server, {**req, "questions": {qid: q}})["answers"][qid]
    # /permute on each choice question: orders from Python's random, probabilities from /v1/systemone.
    for qid, q in req["questions"].items():
        if q["type"] != "choice":
            continue
        status, _, perm = post(server, "/v1/systemone/permute", {"request": req, "question": qid, "n_perm": 3, "seed": i})
        assert status == 200, perm
        assert [r["order"] for r in perm["runs"]] == python_orders(list(q["criteria"]), 3, i)
        assert perm["runs"][0]["probabilities"] == score(server, {**req, "questions": {qid: q}})["answers"][qid]["probabilities"]


# Kev 1.0's truncation fields on /v1/systemone: usage is input_tokens and output_tokens; a
# truncating server adds usage.state_tokens (the whole state), usage.state_tokens_used and
# "truncated" to every response.

def test_truncation_fields(bundle, server):
    got = score(server, REQUEST)
    assert "truncated" not in got and "state_tokens_used" not in got["usage"]
    assert list(got["usage"]) == ["input_tokens", "output_tokens"]
    s = ServeProcess(bundle, "--max-state", 16, "--truncate")
    try:
        long_req = {"state": "word " * 100, "questions": {"n": NOUL}}
        status, _, got = post(s, "/v1/systemone", long_req)
        assert status == 200, got
        assert list(got) == ["model", "answers", "usage", "latency_ms", "truncated"]
        assert list(got["usage"]) == ["input_tokens", "output_tokens", "state_tokens", "state_tokens_used"]
        assert got["truncated"] is True and got["usage"]["state_tokens_used"] == 16 < got["usage"]["state_tokens"]
        cli = json.loads(run_kev("score", "--bundle", bundle, "--max-state", 16, "--truncate",
                                 input=json.dumps(long_req)).stdout)
        assert cli["usage"]["state_tokens"] == got["usage"]["state_tokens"] and cli["truncated"] is True
        status, _, got = post(s, "/v1/systemone", {"state": "hi", "questions": {"n": NOUL}})
        assert got["truncated"] is False and got["usage"]["state_tokens"] == got["usage"]["state_tokens_used"]
    finally:
        s.close()


# Bearer auth (upstream: KEV_API_KEY; here also a key file).

KEY = "s3cr3t-K3y_for.tests~0123456789"


def serve_env(bundle, env, *args):
    """A server with extra environment variables."""
    saved = {k: os.environ.get(k) for k in env}
    os.environ.update(env)
    try:
        return ServeProcess(bundle, "--max-state", MAX_STATE, *args)
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def check_auth(s, key):
    ok = {"Authorization": f"Bearer {key}"}
    for path, method, body in (("/v1/systemone", "POST", REQUEST), ("/v1/models", "GET", None),
                               ("/v1/systemone/separate", "POST", REQUEST), ("/v1/nope", "GET", None)):
        for headers in ({}, {"Authorization": key}, {"Authorization": "Bearer"}, {"Authorization": f"bearer {key}"},
                        {"Authorization": f"Basic {key}"}, {"Authorization": f"Bearer {key}x"},
                        {"Authorization": f"Bearer {key[:-1]}"}, {"Authorization": "Bearer wrong"}):
            status, hdrs, err = s.request(method, path, body, {**headers, "x-typesafe-request-id": "a1"})
            assert status == 401, (path, headers, status)
            assert hdrs["www-authenticate"] == "Bearer" and hdrs["x-typesafe-request-id"] == "a1"
            assert err == {"detail": "missing or invalid API key; send Authorization: Bearer <KEV_API_KEY>"}
        status, _, got = s.request(method, path, body, ok)
        assert status == (404 if path == "/v1/nope" else 200), got
    for path in ("/health", "/health/live", "/health/ready"):
        assert s.request("GET", path)[0] == 200
    assert s.request("GET", "/nope")[0] == 404  # outside /v1: no key needed, as upstream
    status, hdrs, _ = raw_request(s, "OPTIONS", "/v1/systemone", {"Origin": "https://a.example",
                                                                   "Access-Control-Request-Method": "POST"})
    assert status == 200  # preflights carry no credentials
    assert key not in s.stderr()


def test_auth_from_env(bundle):
    s = serve_env(bundle, {"KEV_API_KEY": KEY})
    try:
        check_auth(s, KEY)
    finally:
        s.close()


def test_auth_from_key_file(bundle, tmp_path):
    f = tmp_path / "key"
    f.write_text(KEY + "\n")
    other = tmp_path / "other"
    other.write_text("other-key")
    # The flag wins over KEV_API_KEY_FILE.
    s = serve_env(bundle, {"KEV_API_KEY_FILE": str(other)}, "--api-key-file", f)
    try:
        check_auth(s, KEY)
    finally:
        s.close()
    s = serve_env(bundle, {"KEV_API_KEY_FILE": str(other)})
    try:
        assert s.request("GET", "/v1/models", headers={"Authorization": "Bearer other-key"})[0] == 200
        assert s.request("GET", "/v1/models", headers={"Authorization": f"Bearer {KEY}"})[0] == 401
    finally:
        s.close()


def test_open_without_key(server):
    assert server.request("GET", "/v1/models")[0] == 200


# Upstream's environment configuration; malformed values stop start-up with one sentence.

@pytest.mark.parametrize("env,needle", [
    ({"KEV_TRUNCATE_STATES": "true"}, "KEV_TRUNCATE_STATES"),
    ({"KEV_DATE_FACTS": "2"}, "KEV_DATE_FACTS"),
    ({"KEV_PREFIX_CACHE": "-1"}, "KEV_PREFIX_CACHE"),
    ({"KEV_PREFIX_MIN_TOKENS": "1e3"}, "KEV_PREFIX_MIN_TOKENS"),
    ({"KEV_PREFIX_MAX_TOKENS": "lots"}, "KEV_PREFIX_MAX_TOKENS"),
    ({"KEV_API_KEY": "two words"}, "KEV_API_KEY"),
    ({"KEV_API_KEY": "k", "KEV_API_KEY_FILE": "/nonexistent"}, "only one"),
], ids=["truncate", "date", "cache", "min", "max", "key", "both"])
def test_env_refused(bundle, env, needle):
    proc = run_kev("serve", "--bundle", bundle, "--port", 0, env=env, check=False, timeout=60)
    assert proc.returncode == 2 and proc.stdout == ""
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and needle in lines[0], proc.stderr
    assert "two words" not in proc.stderr


def card(s):
    return s.request("GET", "/v1/models")[2]["models"][0]


def test_env_configuration(bundle):
    s = serve_env(bundle, {"KEV_TRUNCATE_STATES": "1", "KEV_PREFIX_CACHE": "0", "KEV_PREFIX_MAX_TOKENS": "5000",
                           "KEV_USAGE_DETAILS": "1"})
    try:
        c = card(s)
        assert c["truncate_states"] is True and c["prefix_cache"]["size"] == 0 and c["prefix_cache"]["max_tokens"] == 5000
        for _ in range(2):
            got = post(s, "/v1/systemone", REQUEST)[2]
            assert got["truncated"] is False and got["usage"]["cached_tokens"] == 0
        assert card(s)["prefix_cache"]["hits"] == 0
    finally:
        s.close()
    s = serve_env(bundle, {"KEV_PREFIX_MIN_TOKENS": "100000", "KEV_TRUNCATE_STATES": "0", "KEV_USAGE_DETAILS": "1"})
    try:
        for _ in range(2):
            assert post(s, "/v1/systemone", REQUEST)[2]["usage"]["cached_tokens"] == 0
        c = card(s)
        assert c["prefix_cache"]["min_state_tokens"] == 100000 and c["prefix_cache"]["cached_states"] == 0
        assert c["truncate_states"] is False
    finally:
        s.close()
    # Flags win over the environment.
    s = serve_env(bundle, {"KEV_TRUNCATE_STATES": "0", "KEV_PREFIX_CACHE": "7", "KEV_PREFIX_MIN_TOKENS": "100000",
                           "KEV_USAGE_DETAILS": "0"},
                  "--truncate", "--cache-entries", 3, "--cache-min-tokens", 0, "--usage-details")
    try:
        c = card(s)
        assert c["truncate_states"] is True and c["prefix_cache"]["size"] == 3
        post(s, "/v1/systemone", REQUEST)
        assert post(s, "/v1/systemone", REQUEST)[2]["usage"]["cached_tokens"] > 0
    finally:
        s.close()


# Date facts (KEV_DATE_FACTS=1): an independent Python version of upstream's documented rule
# (kev/api.py date_facts / with_date_facts: Python's re and datetime.strptime; render from the
# encoding oracle), applied here to the state, must give the same model input as the server's
# own preprocessing.

MONTHS = "January|February|March|April|May|June|July|August|September|October|November|December"
PY_DATE = re.compile(rf"\b(?:{MONTHS}) \d{{1,2}}, \d{{4}}\b|\b\d{{4}}-\d{{2}}-\d{{2}}\b")
PY_SUFFIX = re.compile(r"(?:\n\ndate_facts: [^\n]*)+$")


def py_date_facts(text):
    found = []
    for m in PY_DATE.finditer(text):
        raw = m.group(0)
        try:
            d = datetime.datetime.strptime(raw, "%B %d, %Y" if "," in raw else "%Y-%m-%d")
        except ValueError:
            continue
        if raw not in [r for r, _ in found]:
            found.append((raw, d))
    facts = []
    for i in range(len(found)):
        for j in range(i + 1, len(found)):
            n = (found[j][1] - found[i][1]).days
            if n == 0:
                facts.append(f"{found[j][0]} is the same day as {found[i][0]}.")
            else:
                facts.append(f"{found[j][0]} is {abs(n)} day{'s' if abs(n) != 1 else ''} "
                             f"{'after' if n > 0 else 'before'} {found[i][0]}.")
    return " ".join(facts)


def py_with_date_facts(state):
    if isinstance(state, dict):
        state = {k: v for k, v in state.items() if k != "date_facts"}
    elif isinstance(state, list):
        state = [v for v in state if not (isinstance(v, dict) and set(v) == {"date_facts"})]
    elif isinstance(state, str):
        state = PY_SUFFIX.sub("", state)
    facts = py_date_facts(render_reference(state))
    if not facts:
        return state
    if isinstance(state, dict):
        return {**state, "date_facts": facts}
    if isinstance(state, list):
        return state + [{"date_facts": facts}]
    return f"{state}\n\ndate_facts: {facts}"


DATE_STATES = [
    "Shipped March 3, 2026; due 2026-03-20; promised March 20, 2026.",
    {"order": {"placed": "2024-02-28", "paid": "February 29, 2024", "shipped": "2024-03-01"}, "note": "2024-02-28 again"},
    ["invoice 2025-12-31", {"due": "January 1, 2026"}, "reminder 2026-01-02", 7, None],
    "Invalid: February 29, 2025 and 2025-02-29 and 2026-13-01 and 2026-00-10 and 0000-01-01 and March 0, 2026 "
    "and March 32, 2026; valid: March 09, 2026 and March 9, 2026 and 2026-03-09.",
    "Not dates: march 3, 2026, x2026-01-01, 2026-01-01x, 12026-01-01, 2026-1-01, Marchy 3, 2026; one: 2026-06-01.",
    "Scripts: ٢٠٢٦-03-05 and 2026-03-04 and March 2٥, 2026 and 2026-0٣-01.",
    "Far apart: December 31, 1999 and 2000-01-01.",
    "Farther: September 14, 1752 and 9999-12-31.",
    "Old annotation stays out 2026-01-01 and 2026-01-11\n\ndate_facts: stale\n\ndate_facts: older",
    "One date only 2026-01-01\n\ndate_facts: stale",
    {"a": "2026-01-01", "date_facts": "stale", "b": "2026-01-03"},
    ["2026-01-01", {"date_facts": "stale"}, {"date_facts": "x", "other": 1}, "2025-12-25"],
    {"deep": {"deeper": [{"when": "July 22, 2026"}, "August 3, 2026"]}},
    "Boundaries as Python's \\b: combining a\u03002026-01-01 and connector \u203f2026-01-02, not \u00e92026-01-03.",
    "No dates at all",
    42,
    None,
]


def test_date_facts_oracle_self_check():
    assert py_date_facts("August 3, 2026 and July 22, 2026") == "July 22, 2026 is 12 days before August 3, 2026."
    assert py_date_facts("2024-02-28 2024-03-01") == "2024-03-01 is 2 days after 2024-02-28."


@pytest.fixture(scope="module")
def date_server(bundle):
    s = serve_env(bundle, {"KEV_DATE_FACTS": "1"})
    try:
        yield s
    finally:
        s.close()


@pytest.mark.parametrize("i", range(len(DATE_STATES)))
def test_date_facts_match_python(server, date_server, i):
    state = DATE_STATES[i]
    questions = {"c": CHOICE, "n": NOUL}
    got = score(date_server, {"state": state, "questions": questions})
    want = score(server, {"state": py_with_date_facts(state), "questions": questions})
    assert got["usage"]["input_tokens"] == want["usage"]["input_tokens"]
    assert got["answers"] == want["answers"]
    # The demo endpoints preprocess the same way.
    sep = post(date_server, "/v1/systemone/separate", {"state": state, "questions": questions})[2]
    assert sep["answers"] == got["answers"]
    perm = post(date_server, "/v1/systemone/permute",
                {"request": {"state": state, "questions": questions}, "question": "c", "n_perm": 1})[2]
    assert perm["runs"][0]["probabilities"] == got["answers"]["c"]["probabilities"]


def test_date_facts_change_the_input(server, date_server):
    state = DATE_STATES[0]
    assert py_with_date_facts(state) != state
    with_facts = score(date_server, {"state": state, "questions": {"n": NOUL}})
    without = score(server, {"state": state, "questions": {"n": NOUL}})
    assert with_facts["usage"]["input_tokens"] > without["usage"]["input_tokens"]


# Limits kept from before, now flags: JSON nesting (--max-json-depth).

def test_max_json_depth_flag(bundle):
    def nested(n):
        v = "x"
        for _ in range(n - 1):
            v = {"k": v}
        return v
    s = ServeProcess(bundle, "--max-state", MAX_STATE, "--max-json-depth", 8)
    try:
        # The body object is level 1, "state" level 2: a state of depth 6 makes 7 levels.
        assert post(s, "/v1/systemone", {"state": nested(6), "questions": {"n": NOUL}})[0] == 200
        status, _, err = post(s, "/v1/systemone", {"state": nested(9), "questions": {"n": NOUL}})
        assert status == 422 and "8 levels" in err["detail"]
    finally:
        s.close()
    proc = run_kev("serve", "--bundle", bundle, "--port", 0, "--max-json-depth", 2000, check=False, timeout=60)
    assert proc.returncode != 0 and "max-json-depth" in proc.stderr


def test_replay_against_configured_server(bundle, server):
    """The replay once more against a server configured as an upstream deployment would be
    (KEV_API_KEY, KEV_TRUNCATE_STATES=1, KEV_DATE_FACTS=1): every contract at once."""
    s = serve_env(bundle, {"KEV_API_KEY": KEY, "KEV_TRUNCATE_STATES": "1", "KEV_DATE_FACTS": "1"})
    try:
        for i, req in enumerate(REPLAY):
            status, hdrs, err = post(s, "/v1/systemone", req, {"x-typesafe-request-id": f"c-{i}"})
            assert status == 401 and hdrs["www-authenticate"] == "Bearer" and hdrs["x-typesafe-request-id"] == f"c-{i}"
            status, hdrs, got = post(s, "/v1/systemone", req, {"Authorization": f"Bearer {KEY}",
                                                                 "x-typesafe-request-id": f"c-{i}",
                                                                 "Origin": "https://frontend.example"})
            assert status == 200, got
            assert hdrs["x-typesafe-request-id"] == f"c-{i}" and TIMING_RE.match(hdrs["server-timing"])
            assert hdrs["access-control-allow-origin"] == "*"
            assert got["model"] == req.get("model", "kev-latest")
            assert list(got) == ["model", "answers", "usage", "latency_ms", "truncated"] and got["truncated"] is False
            assert got["usage"]["state_tokens"] == got["usage"]["state_tokens_used"]
            assert got["usage"]["output_tokens"] == tokens_of(bundle, json.dumps(got["answers"]))
            # Same answers as the plain server given the state Python's date rule makes.
            want = score(server, {**req, "state": py_with_date_facts(req["state"])})
            assert got["answers"] == want["answers"] and got["usage"]["input_tokens"] == want["usage"]["input_tokens"]
        models = s.request("GET", "/v1/models", headers={"Authorization": f"Bearer {KEY}"})[2]["models"]
        assert [m["name"] for m in models] == ["kev-latest", "jev-latest"] and models[0]["truncate_states"] is True
        assert KEY not in s.stderr()
    finally:
        s.close()
