#!/usr/bin/env python3
"""Sizing figures for docs/deploy.md: requests/s of one `kev serve` replica pinned to one
compute thread, and its memory (RSS, PSS from /proc/PID/smaps_rollup), alone and with a second
replica mapping the same bundle.

    /usr/bin/python3 bench/replica_sizing.py --kev build/release/kev --bundle BUNDLE [--requests 20]

Workload: requests with a ~60-token state and 2 questions (a 4-option choice and a noul);
"cold" = a new state each time (prefix computed), "cached" = the same state (prefix cache hit).
One client, one request at a time, --threads 1 --max-inflight 1: the rate is per core."""
import argparse
import json
import os
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "pylib"))
from kevcluster import Replica, request  # noqa: E402


def req(i):
    return {"state": {"session": i, "history": "the customer asked about the delivery of order 1234 and a refund " * 3},
            "questions": {"next": {"type": "choice", "instructions": "Next step?",
                                   "criteria": {"ship": None, "refund": None, "wait": None, "escalate": None}},
                          "upsell": {"type": "noul", "instructions": "Offer a discount?"}}}


def rollup(pid):
    out = {}
    with open(f"/proc/{pid}/smaps_rollup") as f:
        for line in f:
            parts = line.split()
            if len(parts) == 3 and parts[2] == "kB":
                out[parts[0].rstrip(":")] = int(parts[1]) / 1024  # MiB
    return out


def rate(port, reqs):
    t0 = time.monotonic()
    for r in reqs:
        status, _, body = request(port, "POST", "/v1/systemone", r, timeout=600)
        assert status == 200, body
    return len(reqs) / (time.monotonic() - t0)


def mem(pid):
    r = rollup(pid)
    return {k: round(r[k], 1) for k in ("Rss", "Pss", "Pss_Anon", "Pss_File", "Shared_Clean", "Private_Clean")
            if k in r}


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--kev", required=True)
    p.add_argument("--bundle", required=True)
    p.add_argument("--requests", type=int, default=20)
    a = p.parse_args()
    args = ("--threads", 1, "--max-inflight", 1, "--cache-entries", 16)
    one = Replica(a.kev, a.bundle, 0, args)
    two = None
    try:
        request(one.port, "POST", "/v1/systemone", req(-1), timeout=600)  # warm-up (page in the weights)
        cold = rate(one.port, [req(i) for i in range(a.requests)])
        cached = rate(one.port, [req(0)] * a.requests)
        alone = mem(one.pid)
        two = Replica(a.kev, a.bundle, 0, args)
        request(two.port, "POST", "/v1/systemone", req(-1), timeout=600)
        rate(two.port, [req(i) for i in range(min(4, a.requests))])
        both = [mem(one.pid), mem(two.pid)]
        print(json.dumps({"bundle": a.bundle, "requests": a.requests,
                          "requests_per_s_per_core": {"cold_state": round(cold, 4), "cached_state": round(cached, 4)},
                          "s_per_request": {"cold_state": round(1 / cold, 3), "cached_state": round(1 / cached, 3)},
                          "memory_MiB_one_replica": alone, "memory_MiB_two_replicas": both}, indent=1))
    finally:
        one.kill()
        if two:
            two.kill()


if __name__ == "__main__":
    main()
