"""Same-run comparison of HTTP layers on the defects of issue 11 (docs/serving.md, "HTTP layer").

    python3 bench/http_layers/compare.py BUNDLE [MHD_PROBE HTTPLIB_PROBE]

Servers: `kev serve` (Boost.Beast) from KEV_BIN, and optionally the libmicrohttpd 0.9.75 and
cpp-httplib 0.11.4 probes built from this directory (they answer any request 200 "len=N").
Each framing case is sent with a second, smuggled request behind it; "smuggled" means the server
answered that second request too. Loopback only; every server is killed at the end."""
import json
import multiprocessing
import re
import os
import socket
import subprocess
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "tests", "pylib"))
from kevtest import KEV_BIN, free_port, raw_exchange  # noqa: E402

SMUGGLED = b"GET /health/live HTTP/1.1\r\nHost: x\r\n\r\n"
P = b"POST /v1/systemone HTTP/1.1\r\nHost: x\r\n"
CASES = {
    "two different Content-Length": P + b"Content-Length: 2\r\nContent-Length: 40\r\n\r\n{}",
    "Content-Length + chunked": P + b"Content-Length: 7\r\nTransfer-Encoding: chunked\r\n\r\n2\r\n{}\r\n0\r\n\r\n",
    "bare LF header line": P[:-2] + b"\nContent-Length: 2\r\n\r\n{}",
    "Content-Length: +2": P + b"Content-Length: +2\r\n\r\n{}",
    "Content-Length: abc": P + b"Content-Length: abc\r\n\r\n{}",
    "Transfer-Encoding: gzip": P + b"Transfer-Encoding: gzip\r\n\r\n{}",
    "Transfer-Encoding: chunked, gzip": P + b"Transfer-Encoding: chunked, gzip\r\n\r\n2\r\n{}\r\n0\r\n\r\n",
    "space before colon": P + b"Content-Length : 2\r\n\r\n{}",
    "no Host (HTTP/1.1)": b"GET /health/live HTTP/1.1\r\n\r\n",
}


def statuses(data):
    # Status lines anywhere (a response may follow the previous body without a line break).
    return [int(m.group(1)) for m in re.finditer(rb"HTTP/1\.[01] (\d{3}) ", data)]


def framing(port):
    res = {}
    for name, data in CASES.items():
        got, _ = raw_exchange(port, data + SMUGGLED, timeout=5)
        st = statuses(got)
        res[name] = {"statuses": st, "smuggled": len(st) > 1 or (bool(st) and st[0] < 400)}
    return res


def pipelined(port):
    body = b"{}"
    one = P + b"Content-Length: 2\r\n\r\n" + body
    got, _ = raw_exchange(port, one * 3, timeout=5)
    return len(statuses(got))


def headers_limit(port):
    many = b"GET /health/live HTTP/1.1\r\nHost: x\r\n" + b"".join(b"X-%d: 1\r\n" % i for i in range(20000)) + b"\r\n"
    got, _ = raw_exchange(port, many, timeout=10)
    return statuses(got)


def slow_lockout(port, n=40):
    socks = []
    for _ in range(n):
        c = socket.create_connection(("127.0.0.1", port), timeout=5)
        c.sendall(b"GET /health/live HTTP/1.1\r\nHost: x\r\n")
        socks.append(c)
    t = time.monotonic()
    got, _ = raw_exchange(port, b"GET /health/live HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n", timeout=30)
    took = time.monotonic() - t
    for c in socks:
        c.close()
    return {"status": statuses(got), "latency_s": round(took, 3)}


def rss_kib(pid):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])


def chunked_rss(port, pid, mib=64):
    before = rss_kib(pid)
    chunk = b"%x\r\n%s\r\n" % (1 << 20, b"x" * (1 << 20))
    pieces = [(P + b"Transfer-Encoding: chunked\r\n\r\n", 0)] + [(chunk, 0)] * mib + [(b"0\r\n\r\n", 0)]
    got, _ = raw_exchange(port, None, timeout=30, chunks=pieces)
    return {"statuses": statuses(got), "rss_growth_mib": round((rss_kib(pid) - before) / 1024, 1)}


def _hammer(port, seconds, q):
    import http.client
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    n, end = 0, time.monotonic() + seconds
    while time.monotonic() < end:
        conn.request("GET", "/health/live")
        conn.getresponse().read()
        n += 1
    q.put(n)


def throughput(port, procs=4, seconds=3):
    q = multiprocessing.Queue()
    ps = [multiprocessing.Process(target=_hammer, args=(port, seconds, q)) for _ in range(procs)]
    for p in ps:
        p.start()
    total = sum(q.get(timeout=60) for _ in ps)
    for p in ps:
        p.join(timeout=30)
    return round(total / seconds)


def run(name, argv, ready):
    port = free_port()
    argv = [a.replace("PORT", str(port)) for a in argv]
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    try:
        line = proc.stdout.readline()
        assert ready in line, line
        time.sleep(0.2)
        out = {"framing": framing(port), "pipelined_3_answered": pipelined(port),
               "20000_headers": headers_limit(port), "chunked_64MiB": chunked_rss(port, proc.pid),
               "40_slow_connections_then_GET": slow_lockout(port),
               "keepalive_GET_per_s": throughput(port)}
        out["alive_at_end"] = proc.poll() is None
        return out
    finally:
        proc.kill()
        proc.wait(timeout=30)


def main():
    bundle = sys.argv[1]
    results = {"beast (kev serve)": run("kev", [KEV_BIN, "serve", "--bundle", bundle, "--port", "PORT", "--quiet",
                                                "--max-body", str(4 << 20)], "listening")}
    if len(sys.argv) > 3:
        results["libmicrohttpd 0.9.75"] = run("mhd", [sys.argv[2], "PORT"], "ready")
        results["cpp-httplib 0.11.4"] = run("httplib", [sys.argv[3], "PORT"], "ready")
    print(json.dumps(results, indent=1))


if __name__ == "__main__":
    main()
