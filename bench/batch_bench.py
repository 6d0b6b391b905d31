"""`kev serve` cross-request batching: requests/s with --max-batch N vs one request at a time
(--max-batch 1), same binary, same bundle, same requests, same run.

    /usr/bin/python3 bench/batch_bench.py [--kev build/release/kev] [--bundle DIR] [--shape 0.8b]
        [--requests 32] [--max-batch 8] [--rounds 2] [--concurrency 1,4,16] [--perf PREFIX]

Without --bundle a synthetic bundle is built (kev synth --shape SHAPE -> pin -> export, as
scripts/demo.sh does) in a temp dir. Requests are small and their states cached: 8 states are
scored once before timing, then every request is one of them with one choice question of 3
options (a row of a few dozen tokens), so the time is the question rows' pass, the part
batching shares. Both servers (--max-inflight 1) run side by side; for each concurrency
(keep-alive client threads) the two are timed alternately, --rounds times, and the best round
of each is reported with the ratio. Besides wall requests/s (noisy on a shared machine) it
reports the server's CPU time per request (utime + stime from /proc), and the mean batch size
from /health. Every answer is checked equal between the two servers (bit-identical batching).
With --perf PREFIX, one more measurement per server at the last concurrency runs under
`perf record -p` (PREFIX-single.data, PREFIX-batched.data; read with
`perf report -i FILE --sort symbol`).
"""
import argparse
import http.client
import json
import os
import signal
import subprocess
import sys
import tempfile
import time

from benchlib import http_run, percentile, synth_bundle

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), ".."))


STATES = [{"ticket": i, "text": f"customer {i} asks about order {i * 7}"} for i in range(8)]


def make_requests(n):
    return [{"state": STATES[i % len(STATES)],
             "questions": {"next": {"type": "choice", "instructions": "What next?",
                                    "criteria": {"ship": "confirm", "refund": None, "wait": "later"}}}}
            for i in range(n)]


def cpu_seconds(pid):
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")  # utime + stime


def get(port, path):
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
    conn.request("GET", path)
    body = json.loads(conn.getresponse().read())
    conn.close()
    return body


class Server:
    def __init__(self, kev, bundle, max_batch):
        self.max_batch = max_batch
        self.proc = subprocess.Popen([kev, "serve", "--bundle", bundle, "--port", "0", "--quiet",
                                      "--max-inflight", "1", "--max-queue", "64", "--max-batch",
                                      str(max_batch), "--cache-entries", "64"],
                                     stdout=subprocess.PIPE, text=True)
        self.port = int(json.loads(self.proc.stdout.readline())["listening"].rsplit(":", 1)[1])

    def measure(self, reqs, concurrency, perf_data=None):
        perf = None
        if perf_data:
            perf = subprocess.Popen(["perf", "record", "-q", "-o", perf_data, "-p", str(self.proc.pid)],
                                    stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            time.sleep(1)
        b0, c0 = get(self.port, "/health")["batches"], cpu_seconds(self.proc.pid)
        rps, lat, bodies = http_run(self.port, reqs, concurrency)
        answers = [(b["answers"], b["usage"]) for b in bodies]
        if perf:
            perf.send_signal(signal.SIGINT)
            perf.wait(timeout=120)
        b1, c1 = get(self.port, "/health")["batches"], cpu_seconds(self.proc.pid)
        mean_batch = (b1["requests"] - b0["requests"]) / max(1, b1["passes"] - b0["passes"])
        return {"rps": rps, "p50": percentile(lat, 50), "p99": percentile(lat, 99),
                "cpu_ms": (c1 - c0) / len(reqs) * 1e3, "batch": mean_batch, "answers": answers}

    def close(self):
        self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(timeout=120)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--kev", default=os.path.join(ROOT, "build", "release", "kev"))
    ap.add_argument("--bundle")
    ap.add_argument("--shape", default="0.8b")
    ap.add_argument("--requests", type=int, default=32)
    ap.add_argument("--max-batch", type=int, default=8)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--concurrency", default="1,4,16")
    ap.add_argument("--perf", help="perf record one more run per server at the last concurrency")
    a = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="batch-bench-") as d:
        t = time.perf_counter()
        bundle = a.bundle or synth_bundle(a.kev, d, a.shape)
        if not a.bundle:
            print(f"bundle ({a.shape}) built in {time.perf_counter() - t:.0f} s", flush=True)
        reqs = make_requests(a.requests)
        servers = [Server(a.kev, bundle, 1), Server(a.kev, bundle, a.max_batch)]
        try:
            for s in servers:  # fills the cache with every state (and warms the mapping)
                http_run(s.port, make_requests(len(STATES)), 1)
            print(f"{a.requests} requests per measurement, best of {a.rounds} rounds; "
                  f"batched = --max-batch {a.max_batch}, single = --max-batch 1 (both --max-inflight 1)")
            for c in map(int, a.concurrency.split(",")):
                best = [None, None]
                for _ in range(a.rounds):
                    for k, s in enumerate(servers):
                        m = s.measure(reqs, c)
                        if best[k] is None or m["rps"] > best[k]["rps"]:
                            best[k] = m
                assert best[0]["answers"] == best[1]["answers"], "batched answers != one at a time"
                for k, name in ((0, "single "), (1, "batched")):
                    m = best[k]
                    print(f"concurrency {c:2d} {name}: {m['rps']:6.2f} req/s, p50 {m['p50'] * 1e3:7.0f} ms, "
                          f"p99 {m['p99'] * 1e3:7.0f} ms, server CPU {m['cpu_ms']:6.0f} ms/request, "
                          f"mean batch {m['batch']:.1f}", flush=True)
                print(f"concurrency {c:2d} batched/single: {best[1]['rps'] / best[0]['rps']:.2f}x req/s, "
                      f"{best[0]['cpu_ms'] / best[1]['cpu_ms']:.2f}x less CPU per request", flush=True)
            if a.perf:
                for s, name in zip(servers, ("single", "batched")):
                    m = s.measure(reqs, c, f"{a.perf}-{name}.data")
                    print(f"perf {name}: {a.perf}-{name}.data ({m['rps']:.2f} req/s, server CPU "
                          f"{m['cpu_ms']:.0f} ms/request, mean batch {m['batch']:.1f})", flush=True)
        finally:
            for s in servers:
                s.close()


if __name__ == "__main__":
    sys.exit(main())
