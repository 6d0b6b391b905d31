"""`kev serve` throughput and latency vs `kev score --jsonl` on the same requests.

    /usr/bin/python3 bench/serve_bench.py [--kev build/release/kev] [--bundle DIR] [--requests 48]
        [--options 8] [--max-inflight 1]

Without --bundle a tiny synthetic bundle is built (synth -> pin -> export) in a temp dir. Every
request has its own state (no prefix-cache hits), one choice question with --options options.
For concurrency 1, 2 and 4 client threads (keep-alive connections) it reports requests/s and
p50/p99 client-side latency; `kev score --jsonl` answers the same requests in one process
(sequential), reported as requests/s over the stream (process start and model load excluded by
subtracting a one-request run). Answers over HTTP are checked equal to the JSON Lines answers.
"""
import argparse
import json
import os
import signal
import subprocess
import sys
import tempfile
import time

from benchlib import http_run, percentile, synth_bundle

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), ".."))


def make_requests(n, options):
    return [{"state": {"ticket": i, "text": f"customer {i} asks about order {i * 7} and its delivery date"},
             "questions": {"next": {"type": "choice", "instructions": "What next?",
                                    "criteria": {f"action {k}": f"do thing {k}" for k in range(options)}}}}
            for i in range(n)]


def jsonl_rate(kev, bundle, reqs):
    def run(rs):
        text = "".join(json.dumps(r) + "\n" for r in rs)
        t = time.perf_counter()
        p = subprocess.run([kev, "score", "--bundle", bundle, "--jsonl"], input=text, capture_output=True,
                           text=True, check=True)
        return time.perf_counter() - t, [json.loads(l) for l in p.stdout.splitlines()]
    one, _ = run(reqs[:1])
    total, out = run(reqs)
    return (len(reqs) - 1) / max(1e-9, total - one), out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--kev", default=os.path.join(ROOT, "build", "release", "kev"))
    ap.add_argument("--bundle")
    ap.add_argument("--requests", type=int, default=48)
    ap.add_argument("--options", type=int, default=8)
    ap.add_argument("--max-inflight", type=int, default=1)
    a = ap.parse_args()
    with tempfile.TemporaryDirectory() as d:
        bundle = a.bundle or synth_bundle(a.kev, d)
        reqs = make_requests(a.requests, a.options)
        rate, out = jsonl_rate(a.kev, bundle, reqs)
        print(f"kev score --jsonl (sequential): {rate:.1f} req/s")
        for c in (1, 2, 4):
            proc = subprocess.Popen([a.kev, "serve", "--bundle", bundle, "--port", "0", "--quiet",
                                     "--max-inflight", str(a.max_inflight), "--max-queue", "64"],
                                    stdout=subprocess.PIPE, text=True)
            try:
                port = int(json.loads(proc.stdout.readline())["listening"].rsplit(":", 1)[1])
                http_run(port, reqs[:4], 1)  # warm-up (also fills the cache for those 4 states)
                rps, lat, bodies = http_run(port, reqs, c)
                answers = [b["answers"] for b in bodies]
                assert all(answers[i] == out[i]["answers"] for i in range(len(reqs))), "HTTP != JSON Lines"
                print(f"kev serve, concurrency {c} (max-inflight {a.max_inflight}): {rps:.1f} req/s, "
                      f"p50 {percentile(lat, 50) * 1e3:.1f} ms, p99 {percentile(lat, 99) * 1e3:.1f} ms")
            finally:
                proc.send_signal(signal.SIGTERM)
                try:
                    proc.wait(timeout=60)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait()


if __name__ == "__main__":
    sys.exit(main())
