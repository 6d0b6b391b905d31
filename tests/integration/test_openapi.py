"""GET /openapi.json checked by real tools: the served document is src/serve/openapi.json (the one
source, embedded at build time) and is a valid OpenAPI document for @apidevtools/swagger-parser;
real responses of every endpoint and of every status the server can be made to send (200, 400,
401, 404, 405, 413, 415, 417, 422, 431, 503 loading / busy / too many connections), --truncate's
fields, CORS preflights
and upstream's headers (x-typesafe-request-id, server-timing, CORS fields) are validated
against the document's schemas and headers with ajv (tests/openapi/validate.mjs; npm packages
pinned in tests/openapi/package-lock.json, installed by scripts/setup.sh). Not provoked here: 500
(no request makes the server fail internally)."""
import copy
import http.client
import json
import os
import re
import shutil
import socket
import subprocess
import sys
import time

import pytest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "pylib"))
from kevtest import SOURCE_DIR, ServeProcess, fifo_bundle, free_port, raw_exchange, synth_bundle  # noqa: E402

VALIDATOR_DIR = os.path.join(SOURCE_DIR, "tests", "openapi")
DOC_SOURCE = os.path.join(SOURCE_DIR, "src", "serve", "openapi.json")

pytestmark = [
    pytest.mark.skipif(shutil.which("node") is None, reason="node is not installed (scripts/setup.sh)"),
    pytest.mark.skipif(
        not os.path.isdir(os.path.join(VALIDATOR_DIR, "node_modules", "@apidevtools", "swagger-parser")),
        reason="the OpenAPI validator is not installed (scripts/setup.sh runs npm ci in tests/openapi)"),
]

QUICK = {"state": "s", "questions": {"q": {"type": "noul", "instructions": "ok?"}}}


def validate(doc, exchanges, tmp_path):
    doc_file, ex_file = tmp_path / "openapi.json", tmp_path / "exchanges.json"
    doc_file.write_text(json.dumps(doc))
    ex_file.write_text(json.dumps(exchanges))
    proc = subprocess.run(["node", os.path.join(VALIDATOR_DIR, "validate.mjs"), str(doc_file), str(ex_file)],
                          capture_output=True, text=True, timeout=120, cwd=VALIDATOR_DIR)
    assert proc.stdout, proc.stderr
    return proc.returncode, json.loads(proc.stdout)


def exchange(port, method, path, body=None, headers=None):
    """One request over http.client; the exchange as validate.mjs reads it."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
    try:
        if isinstance(body, (dict, list)):
            body = json.dumps(body)
        conn.request(method, path, body=body, headers=headers or {})
        r = conn.getresponse()
        return {"method": method, "path": path, "status": r.status,
                "headers": {k.lower(): v for k, v in r.getheaders()}, "body": r.read().decode("utf-8")}
    finally:
        conn.close()


def raw(port, method, path, data, **kw):
    """Raw bytes on one connection; the (first) response parsed into an exchange."""
    out, _ = raw_exchange(port, data, **kw)
    head, _, rest = out.partition(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    assert lines[0].startswith("HTTP/1."), out[:200]
    headers = {}
    for line in lines[1:]:
        k, _, v = line.partition(":")
        headers[k.strip().lower()] = v.strip()
    body = rest[:int(headers.get("content-length", len(rest)))]
    return {"method": method, "path": path, "status": int(lines[0].split()[1]), "headers": headers,
            "body": body.decode("utf-8")}


@pytest.fixture(scope="module")
def bundle(tmp_path_factory):
    return synth_bundle(tmp_path_factory.mktemp("openapi"), "--seed", 3)[1]


@pytest.fixture(scope="module")
def served(bundle):
    s = ServeProcess(bundle, "--max-state", 256, "--max-body", 65536)
    try:
        got = exchange(s.port, "GET", "/openapi.json")
        assert got["status"] == 200 and got["headers"]["content-type"] == "application/json"
        yield s, json.loads(got["body"])
    finally:
        s.close()


def test_served_document_is_the_source_file(served):
    _, doc = served
    with open(DOC_SOURCE) as f:
        source = json.load(f)
    assert doc["info"]["version"] != source["info"]["version"] and doc["info"]["version"].count(".") == 2
    source["info"]["version"] = doc["info"]["version"]
    assert doc == source


def test_document_is_valid_and_the_validator_refuses_broken_ones(served, tmp_path):
    _, doc = served
    rc, out = validate(doc, [], tmp_path)
    assert rc == 0 and out["document"] == [], out
    broken = copy.deepcopy(doc)
    del broken["paths"]["/health"]["get"]["responses"]["200"]["description"]
    assert validate(broken, [], tmp_path)[0] == 1
    broken = copy.deepcopy(doc)
    broken["paths"]["/v1/systemone"]["post"]["responses"]["200"]["content"]["application/json"]["schema"] = {
        "$ref": "#/components/schemas/Missing"}
    assert validate(broken, [], tmp_path)[0] == 1


def test_document_lists_every_route(served):
    s, doc = served
    # The server's own route table, as /metrics labels every route's latency histogram.
    metrics = exchange(s.port, "GET", "/metrics")["body"]
    routes = set(re.findall(r'^kev_http_request_duration_seconds_count\{route="([^"]+)"\}', metrics, re.M))
    assert routes - {"other"} == set(doc["paths"]), routes
    assert set(doc["paths"]) == {"/v1/systemone", "/v1/systemone/permute", "/v1/systemone/separate", "/health",
                                 "/health/live", "/health/ready", "/v1/models", "/metrics", "/openapi.json"}
    for path, item in doc["paths"].items():  # the server's method, plus the CORS preflight
        assert len(set(item) - {"options"}) == 1 and "options" in item, path


def test_real_responses_match_the_document(bundle, served, tmp_path):
    s, doc = served
    p = s.port
    json_h = {"Content-Type": "application/json"}
    xs = [
        exchange(p, "POST", "/v1/systemone", {"state": {"a": [1, 2]}, "questions": {
            "c": {"type": "choice", "instructions": "pick", "criteria": {"x": None, "y": "why"}},
            "n": {"type": "noul", "instructions": "yes?", "criteria": {"false": "no", "true": "yes"}},
            "s": {"type": "score", "instructions": "rate", "criteria": ["low", "mid", "high"]}}}, json_h),
        exchange(p, "POST", "/v1/systemone/permute", {"request": {"state": "s", "questions": {
            "c": {"type": "choice", "criteria": {"x": None, "y": None, "z": None}}}}, "question": "c", "n_perm": 3}, json_h),
        exchange(p, "POST", "/v1/systemone/separate", {"state": "s", "questions": {
            "n": {"type": "noul"}, "c": {"type": "choice", "criteria": {"x": None, "y": "why"}}}}, json_h),
        exchange(p, "POST", "/v1/systemone", dict(QUICK, model="jev-latest"), json_h),  # any model name
        exchange(p, "GET", "/health"),
        exchange(p, "GET", "/health", headers={"Origin": "http://app.example", "Cookie": "a=b"}),  # CORS echo
        exchange(p, "OPTIONS", "/v1/systemone", headers={
            "Origin": "http://app.example", "Access-Control-Request-Method": "POST",
            "Access-Control-Request-Headers": "authorization, content-type"}),  # preflight
        exchange(p, "GET", "/health/live", headers={"x-typesafe-request-id": "client id 7"}),
        exchange(p, "GET", "/health/ready"),
        exchange(p, "GET", "/v1/models"),
        exchange(p, "GET", "/metrics"),
        exchange(p, "GET", "/openapi.json"),
        exchange(p, "POST", "/v1/systemone", "{not json", json_h),  # 400
        exchange(p, "POST", "/v1/systemone", {"state": "s"}, json_h),  # 422: no questions
        exchange(p, "POST", "/v1/systemone/permute", {"request": QUICK, "question": "q"}, json_h),  # 422: not choice
        exchange(p, "OPTIONS", "/health", headers={"Origin": "x", "Access-Control-Request-Method": "TRACE"}),  # 400
        exchange(p, "OPTIONS", "/health"),  # 405: not a preflight
        exchange(p, "POST", "/v1/systemone", dict(QUICK, state="word " * 400), json_h),  # 422: over --max-state
        exchange(p, "GET", "/missing"),  # 404
        exchange(p, "PUT", "/health"),  # 405
        exchange(p, "GET", "/v1/systemone"),  # 405
        raw(p, "GET", "/health", b"GET /health HTTP/1.1\r\nHost: a\r\nHost: b\r\n\r\n"),  # 400 framing
        raw(p, "POST", "/v1/systemone",
            b"POST /v1/systemone HTTP/1.1\r\nHost: a\r\nContent-Length: 1000000\r\n\r\n"),  # 413
        raw(p, "POST", "/v1/systemone", b"POST /v1/systemone HTTP/1.1\r\nHost: a\r\nContent-Encoding: gzip\r\n"
            b"Content-Length: 2\r\n\r\n{}"),  # 415
        raw(p, "POST", "/v1/systemone",
            b"POST /v1/systemone HTTP/1.1\r\nHost: a\r\nExpect: later\r\nContent-Length: 2\r\n\r\n{}"),  # 417
        raw(p, "GET", "/health", b"GET /health HTTP/1.1\r\nHost: a\r\n" +
            b"".join(b"X-%d: v\r\n" % i for i in range(150)) + b"\r\n"),  # 431
        raw(p, "GET", "/health", b"GET /health HTTP/1.2\r\nHost: a\r\n\r\n"),  # 400: HTTP version
    ]
    assert [x["status"] for x in xs] == [200] * 12 + [400, 422, 422, 400, 405, 422, 404, 405, 405, 400, 413, 415,
                                                      417, 431, 400], [(x["status"], x["body"][:80]) for x in xs]
    assert xs[5]["headers"]["access-control-allow-origin"] == "http://app.example"
    assert xs[6]["body"] == "OK" and xs[7]["headers"]["x-typesafe-request-id"] == "client id 7"
    rc, out = validate(doc, xs, tmp_path)
    bad = [(x["method"], x["path"], x["status"], e) for x, e in zip(xs, out["exchanges"]) if e]
    assert rc == 0 and not bad and out["document"] == [], bad or out


def test_loading_and_busy_responses_match_the_document(bundle, served, tmp_path):
    _, doc = served
    xs = []
    # Loading: a bundle whose manifest is a FIFO blocks loading until the test opens it.
    slow = fifo_bundle(bundle, tmp_path)
    s = ServeProcess(str(slow), port=free_port(), wait_listening=False)
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                xs.append(exchange(s.port, "GET", "/health/live"))
                break
            except OSError:
                assert time.monotonic() < deadline, s.stderr()
                time.sleep(0.05)
        for method, path in (("GET", "/health"), ("GET", "/health/ready"), ("GET", "/v1/models"),
                             ("POST", "/v1/systemone"), ("GET", "/metrics"), ("GET", "/openapi.json")):
            xs.append(exchange(s.port, method, path, QUICK if method == "POST" else None))
        with open(slow / "kev_export.json", "w"):
            pass
        s.proc.wait(timeout=30)
    finally:
        s.close()
    assert [x["status"] for x in xs] == [200, 200, 503, 503, 503, 200, 200], xs

    # Busy: one request holds every body byte the server may keep (--max-body-total), so the next
    # request with a body is refused 503.
    s = ServeProcess(bundle, "--max-body", 1024, "--max-body-total", 1024)
    try:
        with socket.create_connection(("127.0.0.1", s.port), timeout=10) as hold:
            hold.sendall(b"POST /v1/systemone HTTP/1.1\r\nHost: a\r\nContent-Length: 1000\r\n\r\n")
            for _ in range(100):  # bounded: until the server has read the holder's header
                x = exchange(s.port, "POST", "/v1/systemone", QUICK, {"Content-Type": "application/json"})
                if x["status"] == 503:
                    break
                time.sleep(0.05)
            xs.append(x)
    finally:
        s.close()
    # Too many connections: one open connection fills --max-connections 1; the next gets 503.
    s = ServeProcess(bundle, "--max-connections", 1)
    try:
        with socket.create_connection(("127.0.0.1", s.port), timeout=10):
            time.sleep(0.3)  # accepted first
            xs.append(raw(s.port, "GET", "/health", b"GET /health HTTP/1.1\r\nHost: a\r\n\r\n"))
    finally:
        s.close()
    assert [x["status"] for x in xs[-2:]] == [503, 503], xs[-2:]
    assert "busy" in xs[-2]["body"] or "memory" in xs[-2]["body"]
    rc, out = validate(doc, xs, tmp_path)
    bad = [(x["method"], x["path"], x["status"], e) for x, e in zip(xs, out["exchanges"]) if e]
    assert rc == 0 and not bad, bad or out


def test_auth_and_truncation_responses_match_the_document(bundle, served, tmp_path, monkeypatch):
    _, doc = served
    monkeypatch.setenv("KEV_API_KEY", "sekret-key")
    s = ServeProcess(bundle, "--truncate", "--max-state", 16)
    try:
        json_h = {"Content-Type": "application/json"}
        good = dict(json_h, Authorization="Bearer sekret-key")
        xs = [exchange(s.port, "POST", "/v1/systemone", QUICK, json_h),  # 401: no key
              exchange(s.port, "POST", "/v1/systemone/separate", QUICK, dict(json_h, Authorization="Bearer nope")),
              exchange(s.port, "GET", "/v1/models", headers={"Authorization": "Bearer nope"}),  # 401
              exchange(s.port, "POST", "/v1/systemone", QUICK, good),  # 200
              exchange(s.port, "GET", "/v1/models", headers={"Authorization": "Bearer sekret-key"}),  # 200
              exchange(s.port, "GET", "/metrics"),  # open
              exchange(s.port, "GET", "/openapi.json"),  # open
              exchange(s.port, "GET", "/health")]  # open
        long = dict(QUICK, state="word " * 100)
        choice = {"state": "word " * 100, "questions": {"c": {"type": "choice", "criteria": {"x": None, "y": None}}}}
        xs += [exchange(s.port, "POST", "/v1/systemone", long, good),
               exchange(s.port, "POST", "/v1/systemone/separate", long, good),
               exchange(s.port, "POST", "/v1/systemone/permute", {"request": choice, "question": "c", "n_perm": 2}, good)]
    finally:
        s.close()
    assert [x["status"] for x in xs] == [401, 401, 401] + [200] * 8, xs
    assert xs[0]["headers"]["www-authenticate"] == "Bearer"
    assert all(json.loads(x["body"])["truncated"] is True for x in xs[-3:]), xs[-3:]
    rc, out = validate(doc, xs, tmp_path)
    bad = [(x["method"], x["path"], x["status"], e) for x, e in zip(xs, out["exchanges"]) if e]
    assert rc == 0 and not bad, bad or out
    # The document says which operations the key guards: exactly the /v1 ones.
    for path, item in doc["paths"].items():
        for method, op in item.items():
            guarded = {"bearer": []} in op["security"]
            assert guarded == (path.startswith("/v1") and method != "options"), (method, path)
